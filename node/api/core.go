package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/authz"
	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// The operations both edges share, in domain terms. The gRPC services and
// the HTTP handlers read their wire into these arguments, call one of
// them, and write the answer (or the error, through GRPCError or
// HTTPStatus) back; nothing here knows either wire, except that a follower
// forwards writes, and asks for the leader's read index, over gRPC
// (forward.go).

// caller is who sent a request, as an edge reads it off its wire.
type caller struct {
	// auth holds the Authorization values sent ("Bearer <token>").
	auth []string
	// forwarded: a follower forwarded this request once already, so it is
	// not forwarded again.
	forwarded bool
	// author names the caller in the history when the request names no
	// author ("http:<addr>", "grpc:<addr>").
	author string
	// writer: node/authz found an admin or node caller (a certificate, or
	// the token), so the token check is passed.
	writer bool
}

// admin is a caller that passed the admin-token check. Every write takes
// one, so no write can skip the check.
type admin struct{ caller }

// authorize checks the admin token for a write: the one check both edges
// call, as soon as they know the caller.
func (s *Server) authorize(c caller) (admin, error) {
	if s.cfg.AdminToken == "" || c.writer {
		return admin{c}, nil
	}
	if authz.Bearer(c.auth, s.cfg.AdminToken) {
		return admin{c}, nil
	}
	return admin{}, limit.Errorf(limit.ErrUnauthenticated, "this node requires an admin token for writes: send \"Authorization: Bearer <token>\" with the token the node was started with")
}

// check decides a batch into out (one result per item): each item is
// validated once here, where it enters the node; malformed items get an
// error result of their own and are not sent to the Backend.
func (s *Server) check(ctx context.Context, items []limit.Item, out []limit.Result) error {
	if len(items) > MaxItems {
		return limit.Errorf(limit.ErrInvalid, "items: %d in one request; at most %d (split the batch)", len(items), MaxItems)
	}
	return limit.DecideValid(items, out, func(valid []limit.Item, out []limit.Result) error {
		return s.b.Check(ctx, valid, out)
	})
}

// getLimits reports a key's quota under every rule, taking nothing.
func (s *Server) getLimits(ctx context.Context, key string) ([]KeyLimit, error) {
	if err := limit.ValidateKey(key); err != nil {
		return nil, err
	}
	return s.b.GetLimits(ctx, key)
}

// A read is read-your-writes unless the caller asks for a stale one: the
// answering node first learns the leader's read index (a version covering
// every write acknowledged before the read began: rulesraft.Store.ReadIndex
// on the leader, the Rules.ReadIndex RPC from a follower) and waits until
// its own FSM has applied that version; then it answers from its local
// copy. A stale read answers from the local copy at once.

// readInfo says how a read was served, for the edges to report.
type readInfo struct {
	stale   bool
	version uint64 // the local set's version the answer came from
}

// mode names the read as the HTTP API and the CLI report it.
func (r readInfo) mode() string {
	if r.stale {
		return "stale"
	}
	return "consistent"
}

// catchUp waits until the local store has every write acknowledged before
// it was called, within ReadTimeout. No reachable leader, or a local FSM
// that does not catch up in time, is limit.ErrNotLeader or ErrUnavailable
// (HTTP 503), never a silently stale answer.
func (s *Server) catchUp(ctx context.Context, c caller) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadTimeout)
	defer cancel()
	st := s.b.Rules()
	v, err := s.readIndex(ctx, c)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, limit.ErrNotLeader) {
			err = limit.Errorf(limit.ErrUnavailable, "no Raft leader answered within %s: %v", s.cfg.ReadTimeout, err)
		}
		return fmt.Errorf("read-your-writes read: %w (a stale read, ?stale=true or --stale, answers from this node's copy)", err)
	}
	if v == 0 || st.Current().Version >= v {
		return nil
	}
	if _, err := st.WaitVersion(ctx, v-1); err != nil {
		if errors.Is(err, limit.ErrClosed) || errors.Is(err, limit.ErrUnavailable) {
			return err
		}
		return limit.Errorf(limit.ErrUnavailable, "read-your-writes read: this node has not applied rules version %d within %s (it is at %d); retry, or read stale", v, s.cfg.ReadTimeout, st.Current().Version)
	}
	return nil
}

// readIndex asks the leader for its read index: the local store when this
// node leads, the leader's Rules.ReadIndex otherwise (once; a request that
// was itself forwarded is not passed on).
func (s *Server) readIndex(ctx context.Context, c caller) (uint64, error) {
	st := s.b.Rules()
	if st.IsLeader() {
		v, err := st.ReadIndex(ctx)
		if err == nil || !errors.Is(err, limit.ErrNotLeader) {
			return v, err
		}
		// Leadership moved away since IsLeader: ask the new leader.
	}
	rc, fctx, err := s.leaderClient(ctx, c)
	if err != nil {
		return 0, err
	}
	resp, err := rc.ReadIndex(fctx, &weirv1.ReadIndexRequest{})
	if status.Code(err) == codes.Unimplemented {
		// A leader that predates ReadIndex (a rolling upgrade): its
		// consistent ListRules (a Barrier, then its set) gives the same
		// version, at the price of sending the whole set.
		set, lerr := rc.ListRules(fctx, &weirv1.ListRulesRequest{Consistent: true})
		if lerr != nil {
			return 0, fromGRPC(lerr)
		}
		return set.GetVersion(), nil
	}
	if err != nil {
		return 0, fromGRPC(err)
	}
	return resp.GetVersion(), nil
}

// current returns the local set, after catching up with the leader unless
// stale.
func (s *Server) current(ctx context.Context, c caller, stale bool) (*rules.Set, readInfo, error) {
	if !stale {
		if err := s.catchUp(ctx, c); err != nil {
			return nil, readInfo{}, err
		}
	}
	set := s.b.Rules().Current()
	return set, readInfo{stale: stale, version: set.Version}, nil
}

// listRules returns the rule set with the overrides in force now.
func (s *Server) listRules(ctx context.Context, c caller, stale bool) (*rules.Set, readInfo, error) {
	set, ri, err := s.current(ctx, c, stale)
	if err != nil {
		return nil, readInfo{}, err
	}
	return activeSet(set, s.cfg.Now), ri, nil
}

// getRule returns one rule and how it was read (the version of the set it
// is from).
func (s *Server) getRule(ctx context.Context, c caller, id string, stale bool) (rules.Rule, readInfo, error) {
	if id == "" {
		return rules.Rule{}, readInfo{}, limit.Errorf(limit.ErrInvalid, "id: must not be empty")
	}
	set, ri, err := s.current(ctx, c, stale)
	if err != nil {
		return rules.Rule{}, readInfo{}, err
	}
	r, ok := set.Rule(id)
	if !ok {
		return rules.Rule{}, readInfo{}, limit.Errorf(limit.ErrNotFound, "rule %q not found (version %d)", id, set.Version)
	}
	return r, ri, nil
}

// history returns up to n versions, newest first.
func (s *Server) history(ctx context.Context, c caller, n int, stale bool) ([]rulesraft.HistoryEntry, readInfo, error) {
	if !stale {
		if err := s.catchUp(ctx, c); err != nil {
			return nil, readInfo{}, err
		}
	}
	st := s.b.Rules()
	v := st.Current().Version
	return st.History(n), readInfo{stale: stale, version: v}, nil
}

// setAt returns the set as of an earlier version; a version above the
// local one is waited for as a read-your-writes read, unless stale.
func (s *Server) setAt(ctx context.Context, c caller, v uint64, stale bool) (*rules.Set, readInfo, error) {
	st := s.b.Rules()
	if !stale && v > st.Current().Version {
		if err := s.catchUp(ctx, c); err != nil {
			return nil, readInfo{}, err
		}
	}
	set, err := st.SetAt(v)
	if err != nil {
		return nil, readInfo{}, err
	}
	return set, readInfo{stale: stale, version: st.Current().Version}, nil
}

// activeSet returns set without overrides that expired by now. It shares
// set when nothing expired.
func activeSet(set *rules.Set, now func() time.Time) *rules.Set {
	t := now()
	n := 0
	for _, o := range set.Overrides {
		if o.Active(t) {
			n++
		}
	}
	if n == len(set.Overrides) {
		return set
	}
	out := &rules.Set{Version: set.Version, Rules: set.Rules, Overrides: make([]rules.Override, 0, n)}
	for _, o := range set.Overrides {
		if o.Active(t) {
			out.Overrides = append(out.Overrides, o)
		}
	}
	return out
}

// written is the outcome of a write: the version it made and, for applies
// and dry runs, what changed ("+ id", "- id", "~ id: field a -> b").
type written struct {
	version uint64
	diff    []string
}

// applyRules validates in against the local set (rules.Merge, the FSM's
// own merge) and, unless dryRun, applies it on the leader. A dry run
// answers the current version and the diff, and writes nothing; like a
// read, it first catches up with every acknowledged write.
func (s *Server) applyRules(ctx context.Context, a admin, in []rules.Rule, replaceAll, dryRun bool, author string) (written, error) {
	if dryRun { // a dry run is a read: diff against every acknowledged write
		if err := s.catchUp(ctx, a.caller); err != nil {
			return written{}, err
		}
	}
	cur := s.b.Rules().Current()
	next, err := rules.Merge(cur.Rules, in, replaceAll)
	if err != nil {
		return written{}, err
	}
	if err := rules.CheckWrite(in); err != nil { // refused on write only: the FSM replays older logs
		return written{}, err
	}
	diff := rules.DiffSets(cur.Rules, next)
	if dryRun {
		return written{version: cur.Version, diff: diff}, nil
	}
	norm := make([]rules.Rule, len(in))
	for i, r := range in {
		norm[i] = rules.Normalize(r)
	}
	w, err := s.write(ctx, a, rulesraft.Command{Op: rulesraft.OpApply, Rules: norm, ReplaceAll: replaceAll, Author: author})
	if err != nil {
		return written{}, err
	}
	if w.diff == nil { // applied here; forwarded answers carry the leader's diff
		w.diff = diff
	}
	return w, nil
}

// deleteRule deletes a rule and its overrides.
func (s *Server) deleteRule(ctx context.Context, a admin, id, author string) (written, error) {
	if id == "" {
		return written{}, limit.Errorf(limit.ErrInvalid, "id: must not be empty")
	}
	return s.write(ctx, a, rulesraft.Command{Op: rulesraft.OpDeleteRule, ID: id, Author: author})
}

// rollback restores the rules and overrides of an earlier version as a
// new version.
func (s *Server) rollback(ctx context.Context, a admin, version uint64, author string) (written, error) {
	if version == 0 {
		return written{}, limit.Errorf(limit.ErrInvalid, "version: must be > 0 (see the history for versions)")
	}
	return s.write(ctx, a, rulesraft.Command{Op: rulesraft.OpRollback, Version: version, Author: author})
}

// setOverride creates or replaces one override. Its expiry is kept to the
// millisecond, in UTC, as the wire carries it, whichever edge it came from.
func (s *Server) setOverride(ctx context.Context, a admin, o rules.Override, author string) (written, error) {
	if !o.ExpiresAt.IsZero() {
		o.ExpiresAt = time.UnixMilli(o.ExpiresAt.UnixMilli()).UTC()
	}
	var err error
	if r, ok := s.b.Rules().Current().Rule(o.Rule); ok {
		err = o.ValidateFor(r)
	} else {
		err = o.Validate()
	}
	if err != nil {
		return written{}, err
	}
	return s.write(ctx, a, rulesraft.Command{Op: rulesraft.OpSetOverride, Override: &o, Author: author})
}

// deleteOverride deletes one override.
func (s *Server) deleteOverride(ctx context.Context, a admin, key, rule, author string) (written, error) {
	var missing []string
	if key == "" {
		missing = append(missing, "key")
	}
	if rule == "" {
		missing = append(missing, "rule")
	}
	if len(missing) > 0 {
		return written{}, limit.Errorf(limit.ErrInvalid, "%s: must not be empty", strings.Join(missing, " and "))
	}
	return s.write(ctx, a, rulesraft.Command{Op: rulesraft.OpDeleteOverride, Key: key, Rule: rule, Author: author})
}

// write applies cmd on the local store when this node is the leader (the
// Store stamps At with the leader's clock); otherwise it forwards cmd to
// the leader (forward.go). A node that loses leadership during Apply does
// not forward (the outcome is unknown, and a retry could apply twice): the
// caller gets rulesraft.ErrOutcomeUnknown (503 unavailable, which the CLI
// does not send again); not_leader means nothing entered the log.
// cmd.Author empty means the caller's default author.
func (s *Server) write(ctx context.Context, a admin, cmd rulesraft.Command) (written, error) {
	if cmd.Author == "" {
		cmd.Author = a.author
	}
	st := s.b.Rules()
	if !st.IsLeader() {
		w, err := s.forward(ctx, a.caller, cmd)
		if err != nil {
			s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeError).Inc()
			return written{}, err
		}
		s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeForwarded).Inc()
		// Answer once this node has applied the write too (bounded, best
		// effort: the write is committed either way), so that a check or
		// a stale read here right after the answer already sees it.
		if w.version > st.Current().Version {
			wctx, cancel := context.WithTimeout(ctx, s.cfg.ReadTimeout)
			_, _ = st.WaitVersion(wctx, w.version-1)
			cancel()
		}
		return w, nil
	}
	cmd.At = s.cfg.Now()
	v, err := st.Apply(ctx, cmd)
	if err != nil {
		s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeError).Inc()
		return written{}, err
	}
	s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeOK).Inc()
	return written{version: v}, nil
}
