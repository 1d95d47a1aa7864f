package rulesraft

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// DefaultHistoryLimit is how many versions the FSM keeps when none is set.
const DefaultHistoryLimit = 1000

var _ raft.FSM = (*FSM)(nil)

// HistoryEntry describes one version: who made it, when (the leader's stamp)
// and what it did.
type HistoryEntry struct {
	Version uint64    `json:"version"`
	Author  string    `json:"author,omitempty"`
	At      time.Time `json:"at"`
	Summary string    `json:"summary"`
}

// version is one immutable state of the rule set. Rules and overrides are
// held by pointer so consecutive versions share every rule they did not
// change, and a slice that did not change at all is shared whole.
//
// The head (the current version) holds its lists flat, for the commands
// to work on; a version that is no longer the head is compacted into
// pieces shared with its neighbours (pieces.go), so the kept history
// costs memory in proportion to what each version changed.
type version struct {
	HistoryEntry
	prev      uint64            // the version this one was made from (0: none)
	rules     []*rules.Rule     // sorted by ID; never mutated once published; nil once compacted
	overrides []*rules.Override // sorted by Rule, Key; never mutated once published; nil once compacted

	compacted  bool
	rulePieces pieces[rules.Rule]
	ovPieces   pieces[rules.Override]
}

func ruleKey(r *rules.Rule) string           { return r.ID }
func overrideKeyOf(o *rules.Override) string { return o.Rule + "\x00" + o.Key }

// lists returns v's rules and overrides, flat. They must not be modified.
func (v *version) lists() ([]*rules.Rule, []*rules.Override) {
	if !v.compacted {
		return v.rules, v.overrides
	}
	return v.rulePieces.flat(), v.ovPieces.flat()
}

// compact returns v stored in pieces, sharing those of like (a
// neighbour in the history, or nil). v itself is not changed: a reader
// may hold it.
func (v *version) compact(like *version) *version {
	if v.compacted {
		return v
	}
	var lr pieces[rules.Rule]
	var lo pieces[rules.Override]
	if like != nil && like.compacted {
		lr, lo = like.rulePieces, like.ovPieces
	}
	return &version{
		HistoryEntry: v.HistoryEntry,
		prev:         v.prev,
		compacted:    true,
		rulePieces:   toPieces(v.rules, ruleKey, lr),
		ovPieces:     toPieces(v.overrides, overrideKeyOf, lo),
	}
}

func (v *version) set() *rules.Set {
	s := &rules.Set{Version: v.Version}
	rs, ovs := v.lists()
	if len(rs) > 0 {
		s.Rules = make([]rules.Rule, len(rs))
		for i, r := range rs {
			s.Rules[i] = *r
		}
	}
	if len(ovs) > 0 {
		s.Overrides = make([]rules.Override, len(ovs))
		for i, o := range ovs {
			s.Overrides[i] = *o
		}
	}
	return s
}

// FSM is the Raft state machine holding the rule set, overrides and their
// history. Raft calls Apply, Snapshot and Restore from one goroutine; every
// other method may be called from any goroutine.
type FSM struct {
	limit int
	cur   atomic.Pointer[rules.Set] // published copy of head, read without locks

	mu      sync.RWMutex
	head    *version      // the current state; version 0 before any command
	hist    []*version    // ascending by Version, at most limit; last is head
	changed chan struct{} // closed and replaced whenever head changes
}

// NewFSM returns an empty FSM (version 0) that keeps historyLimit versions
// (DefaultHistoryLimit when historyLimit <= 0). Every member of one Raft
// group must use the same limit: whether a rollback target still exists is
// decided from the local history.
func NewFSM(historyLimit int) *FSM {
	if historyLimit <= 0 {
		historyLimit = DefaultHistoryLimit
	}
	f := &FSM{limit: historyLimit, head: &version{}, changed: make(chan struct{})}
	f.cur.Store(f.head.set())
	return f
}

// Current returns the current rule set. It must not be modified.
func (f *FSM) Current() *rules.Set { return f.cur.Load() }

// History returns up to limit entries, newest first (all when limit <= 0).
func (f *FSM) History(limit int) []HistoryEntry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := len(f.hist)
	if limit > 0 && limit < n {
		n = limit
	}
	out := make([]HistoryEntry, 0, n)
	for i := len(f.hist) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, f.hist[i].HistoryEntry)
	}
	return out
}

// SetAt returns the rule set as it was at version v: ErrVersionGone when v
// is older than the kept history, ErrNotFound when no command made v.
func (f *FSM) SetAt(v uint64) (*rules.Set, error) {
	f.mu.RLock()
	ver, err := f.lookupLocked(v)
	f.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	return ver.set(), nil
}

// lookupLocked finds version v in the history. Version 0 is the empty
// state before the first command, found while the history reaches back to it.
func (f *FSM) lookupLocked(v uint64) (*version, error) {
	if v == f.head.Version {
		return f.head, nil
	}
	if v > f.head.Version {
		return nil, fmt.Errorf("version %d %w (the current version is %d)", v, ErrNotFound, f.head.Version)
	}
	if v == 0 && f.hist[0].prev == 0 {
		return &version{}, nil // the empty start, while history reaches back to it
	}
	if v < f.hist[0].Version {
		return nil, fmt.Errorf("version %d %w", v, ErrVersionGone)
	}
	i, ok := slices.BinarySearchFunc(f.hist, v, func(e *version, t uint64) int { return cmp.Compare(e.Version, t) })
	if !ok {
		return nil, fmt.Errorf("version %d %w", v, ErrNotFound)
	}
	return f.hist[i], nil
}

// Check reports the error c would meet if it were applied now, on the
// current head, at c.At; it changes nothing. The leader calls it before
// the log, so a command it refuses uses no version.
func (f *FSM) Check(c Command) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, err := transition(f.head, c, f.head.Version+1, c.At, f.lookupLocked)
	return err
}

// Apply applies one committed log entry. It returns a Result; a rejected
// command changes nothing.
func (f *FSM) Apply(l *raft.Log) any {
	c, err := decodeCommand(l.Data)
	if err != nil {
		return Result{Version: f.Current().Version, Err: err}
	}
	at := c.At
	if at.IsZero() {
		at = l.AppendedAt
	}
	f.mu.RLock()
	head := f.head
	next, err := transition(head, c, l.Index, at, f.lookupLocked)
	f.mu.RUnlock()
	if err != nil {
		return Result{Version: head.Version, Err: err}
	}
	if next == nil { // a noop that pruned nothing
		return Result{Version: head.Version}
	}
	f.mu.Lock()
	f.hist = append(f.hist, next)
	compactBeforeHead(f.hist)
	if over := len(f.hist) - f.limit; over > 0 {
		n := copy(f.hist, f.hist[over:])
		clear(f.hist[n:])
		f.hist = f.hist[:n]
	}
	f.publishLocked(next)
	f.mu.Unlock()
	return Result{Version: next.Version}
}

// compactBeforeHead compacts the version before the head of hist (the
// head until now), sharing the pieces of the one before it.
func compactBeforeHead(hist []*version) {
	n := len(hist)
	if n < 2 {
		return
	}
	var like *version
	if n >= 3 {
		like = hist[n-3]
	}
	hist[n-2] = hist[n-2].compact(like)
}

// publishLocked makes v the current state and wakes every waiter.
func (f *FSM) publishLocked(v *version) {
	f.head = v
	f.cur.Store(v.set())
	close(f.changed)
	f.changed = make(chan struct{})
}

// transition computes the version command c makes at log index idx, or an
// error and no change. It returns nil, nil for a noop that changed nothing.
// It is pure: at is the only time it reads.
func transition(head *version, c Command, idx uint64, at time.Time, lookup func(uint64) (*version, error)) (*version, error) {
	if idx <= head.Version {
		return nil, fmt.Errorf("%w: log index %d is not after version %d", ErrInvalid, idx, head.Version)
	}
	rs, ovs := head.rules, head.overrides
	var summary string
	var err error
	switch c.Op {
	case OpApply:
		rs, ovs, summary, err = applyRules(head, c)
	case OpDeleteRule:
		rs, ovs, summary, err = deleteRule(head, c.ID)
	case OpSetOverride:
		ovs, summary, err = setOverride(head, c.Override, at)
	case OpDeleteOverride:
		ovs, summary, err = deleteOverride(head, c.Rule, c.Key)
	case OpRollback:
		var old *version
		if old, err = lookup(c.Version); err == nil {
			rs, ovs = old.lists()
			summary = fmt.Sprintf("rollback to version %d", c.Version)
		}
	case OpNoop:
	default:
		err = fmt.Errorf("%w: unknown op %q", ErrInvalid, c.Op)
	}
	if err != nil {
		return nil, err
	}
	ovs, pruned := pruneExpired(ovs, at)
	if pruned > 0 {
		summary = joinSummary(summary, fmt.Sprintf("%d expired override(s) pruned", pruned))
	}
	if c.Op == OpNoop && pruned == 0 {
		return nil, nil
	}
	return &version{
		HistoryEntry: HistoryEntry{Version: idx, Author: c.Author, At: at, Summary: summary},
		prev:         head.Version,
		rules:        rs,
		overrides:    ovs,
	}, nil
}

func joinSummary(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func findRule(rs []*rules.Rule, id string) (int, bool) {
	return slices.BinarySearchFunc(rs, id, func(r *rules.Rule, id string) int { return strings.Compare(r.ID, id) })
}

func cmpOverride(a *rules.Override, rule, key string) int {
	if c := strings.Compare(a.Rule, rule); c != 0 {
		return c
	}
	return strings.Compare(a.Key, key)
}

func findOverride(ovs []*rules.Override, rule, key string) (int, bool) {
	return slices.BinarySearchFunc(ovs, rule, func(o *rules.Override, r string) int { return cmpOverride(o, r, key) })
}

// keepOverridesOf drops overrides whose rule is not in rs; it returns ovs
// itself when none is dropped.
func keepOverridesOf(ovs []*rules.Override, rs []*rules.Rule) []*rules.Override {
	drop := 0
	for _, o := range ovs {
		if _, ok := findRule(rs, o.Rule); !ok {
			drop++
		}
	}
	if drop == 0 {
		return ovs
	}
	out := make([]*rules.Override, 0, len(ovs)-drop)
	for _, o := range ovs {
		if _, ok := findRule(rs, o.Rule); ok {
			out = append(out, o)
		}
	}
	return out
}

func applyRules(head *version, c Command) ([]*rules.Rule, []*rules.Override, string, error) {
	// Only the rules given are normalized and validated (Merge over an
	// empty set); the head's rules are shared by pointer, so a write
	// costs time in proportion to what it changes, not to the set.
	given, err := rules.Merge(nil, c.Rules, c.ReplaceAll)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var base []*rules.Rule
	if !c.ReplaceAll {
		base = head.rules
	}
	var added, changed, removed []string
	rs := make([]*rules.Rule, 0, len(base)+len(given))
	i, j := 0, 0
	for i < len(base) || j < len(given) {
		switch {
		case j == len(given) || (i < len(base) && base[i].ID < given[j].ID):
			rs = append(rs, base[i])
			i++
		case i == len(base) || given[j].ID < base[i].ID:
			if p, ok := findRule(head.rules, given[j].ID); ok && head.rules[p].Equal(given[j]) {
				rs = append(rs, head.rules[p]) // replace all, unchanged
			} else {
				rs = append(rs, &given[j])
				if ok {
					changed = append(changed, given[j].ID)
				} else {
					added = append(added, given[j].ID)
				}
			}
			j++
		default: // the same id
			if base[i].Equal(given[j]) {
				rs = append(rs, base[i])
			} else {
				rs = append(rs, &given[j])
				changed = append(changed, given[j].ID)
			}
			i++
			j++
		}
	}
	if err := rules.CheckCount(len(rs)); err != nil {
		return nil, nil, "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if c.ReplaceAll {
		for _, r := range head.rules {
			if _, ok := findRule(rs, r.ID); !ok {
				removed = append(removed, r.ID)
			}
		}
	}
	if slices.Equal(rs, head.rules) {
		rs = head.rules
	}
	slices.Sort(added)
	slices.Sort(changed)
	verb := "apply"
	if c.ReplaceAll {
		verb = "replace all"
	}
	summary := fmt.Sprintf("%s %d rule(s): %s", verb, len(c.Rules), describe(added, changed, removed))
	return rs, keepOverridesOf(head.overrides, rs), summary, nil
}

func describe(added, changed, removed []string) string {
	var parts []string
	list := func(verb string, ids []string) {
		if len(ids) == 0 {
			return
		}
		const show = 5
		s := strings.Join(ids[:min(len(ids), show)], ", ")
		if len(ids) > show {
			s += fmt.Sprintf(" and %d more", len(ids)-show)
		}
		parts = append(parts, verb+" "+s)
	}
	list("added", added)
	list("changed", changed)
	list("removed", removed)
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, "; ")
}

func deleteRule(head *version, id string) ([]*rules.Rule, []*rules.Override, string, error) {
	i, ok := findRule(head.rules, id)
	if !ok {
		return nil, nil, "", fmt.Errorf("rule %q %w", id, ErrNotFound)
	}
	rs := slices.Delete(slices.Clone(head.rules), i, i+1)
	return rs, keepOverridesOf(head.overrides, rs), fmt.Sprintf("delete rule %s", id), nil
}

func setOverride(head *version, o *rules.Override, at time.Time) ([]*rules.Override, string, error) {
	if o == nil {
		return nil, "", fmt.Errorf("%w: set_override without an override", ErrInvalid)
	}
	ov := *o
	if err := ov.Validate(); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	ri, ok := findRule(head.rules, ov.Rule)
	if !ok {
		return nil, "", fmt.Errorf("override for rule %q: rule %w", ov.Rule, ErrNotFound)
	}
	if err := ov.ValidateFor(*head.rules[ri]); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if !ov.Active(at) {
		return nil, "", fmt.Errorf("%w: override for %s/%s expired at %s", ErrInvalid, ov.Rule, ov.Key, ov.ExpiresAt.Format(time.RFC3339))
	}
	i, ok := findOverride(head.overrides, ov.Rule, ov.Key)
	if !ok && len(head.overrides) >= rules.MaxOverrides {
		return nil, "", fmt.Errorf("%w: a rule set holds at most %d overrides; delete some first", ErrInvalid, rules.MaxOverrides)
	}
	ovs := slices.Clone(head.overrides)
	if ok {
		ovs[i] = &ov
	} else {
		ovs = slices.Insert(ovs, i, &ov)
	}
	return ovs, fmt.Sprintf("set override %s for %s", ov.Rule, ov.Key), nil
}

func deleteOverride(head *version, rule, key string) ([]*rules.Override, string, error) {
	i, ok := findOverride(head.overrides, rule, key)
	if !ok {
		return nil, "", fmt.Errorf("override %s for %s %w", rule, key, ErrNotFound)
	}
	return slices.Delete(slices.Clone(head.overrides), i, i+1), fmt.Sprintf("delete override %s for %s", rule, key), nil
}

// pruneExpired drops overrides no longer active at at; it returns ovs itself
// when none is dropped.
func pruneExpired(ovs []*rules.Override, at time.Time) ([]*rules.Override, int) {
	n := 0
	for _, o := range ovs {
		if !o.Active(at) {
			n++
		}
	}
	if n == 0 {
		return ovs, 0
	}
	out := make([]*rules.Override, 0, len(ovs)-n)
	for _, o := range ovs {
		if o.Active(at) {
			out = append(out, o)
		}
	}
	return out, n
}

// Snapshot captures the current state and history. The history entries are
// immutable, so copying the slice is enough; Persist encodes it later on
// Raft's snapshot goroutine.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &fsmSnapshot{hist: slices.Clone(f.hist)}, nil
}

// Restore replaces the whole state with a snapshot written by Persist.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var file snapshotFile
	if err := json.NewDecoder(rc).Decode(&file); err != nil {
		return fmt.Errorf("rules store: restore snapshot: %w", err)
	}
	hist, err := file.decode()
	if err != nil {
		return err
	}
	if over := len(hist) - f.limit; over > 0 {
		hist = slices.Clone(hist[over:])
	}
	head := &version{}
	if len(hist) > 0 {
		head = hist[len(hist)-1]
	}
	f.mu.Lock()
	f.hist = hist
	f.publishLocked(head)
	f.mu.Unlock()
	return nil
}
