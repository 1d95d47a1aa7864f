package rulesraft

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// snapshotFormat versions the snapshot encoding.
const snapshotFormat = 1

// snapshotFile is the JSON form of a snapshot: the kept history, oldest
// first, each version written as a delta from the one before it (the first
// from the empty state). The current state is the last version.
type snapshotFile struct {
	Format   int               `json:"format"`
	Versions []snapshotVersion `json:"versions"`
}

type snapshotVersion struct {
	HistoryEntry
	Prev         uint64           `json:"prev"`
	PutRules     []rules.Rule     `json:"put_rules,omitempty"`
	DelRules     []string         `json:"del_rules,omitempty"`
	PutOverrides []rules.Override `json:"put_overrides,omitempty"`
	DelOverrides []overrideKey    `json:"del_overrides,omitempty"`
}

type overrideKey struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
}

func ruleID(r *rules.Rule) overrideKey         { return overrideKey{Rule: r.ID} }
func overrideID(o *rules.Override) overrideKey { return overrideKey{Rule: o.Rule, Key: o.Key} }

func cmpKey(a, b overrideKey) int {
	if c := strings.Compare(a.Rule, b.Rule); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// diff lists what changed from prev to cur (both sorted by key). Elements
// shared by pointer are unchanged.
func diff[T any](prev, cur []*T, key func(*T) overrideKey) (put []T, del []overrideKey) {
	i, j := 0, 0
	for i < len(prev) || j < len(cur) {
		var c int
		switch {
		case i == len(prev):
			c = 1
		case j == len(cur):
			c = -1
		default:
			c = cmpKey(key(prev[i]), key(cur[j]))
		}
		switch {
		case c < 0:
			del = append(del, key(prev[i]))
			i++
		case c > 0:
			put = append(put, *cur[j])
			j++
		default:
			if prev[i] != cur[j] {
				put = append(put, *cur[j])
			}
			i++
			j++
		}
	}
	return put, del
}

// patch applies a diff to prev, sharing every element it leaves alone; with
// an empty diff it returns prev itself.
func patch[T any](prev []*T, put []T, del []overrideKey, key func(*T) overrideKey) []*T {
	if len(put) == 0 && len(del) == 0 {
		return prev
	}
	gone := make(map[overrideKey]bool, len(put)+len(del))
	for _, k := range del {
		gone[k] = true
	}
	for i := range put {
		gone[key(&put[i])] = true
	}
	out := make([]*T, 0, len(prev)+len(put))
	for _, p := range prev {
		if !gone[key(p)] {
			out = append(out, p)
		}
	}
	for i := range put {
		out = append(out, &put[i])
	}
	slices.SortFunc(out, func(a, b *T) int { return cmpKey(key(a), key(b)) })
	return out
}

func encodeSnapshot(hist []*version) snapshotFile {
	f := snapshotFile{Format: snapshotFormat, Versions: make([]snapshotVersion, len(hist))}
	var prevRules []*rules.Rule
	var prevOverrides []*rules.Override
	for i, v := range hist {
		sv := snapshotVersion{HistoryEntry: v.HistoryEntry, Prev: v.prev}
		rs, ovs := v.lists()
		sv.PutRules, sv.DelRules = diffRules(prevRules, rs)
		sv.PutOverrides, sv.DelOverrides = diff(prevOverrides, ovs, overrideID)
		f.Versions[i] = sv
		prevRules, prevOverrides = rs, ovs
	}
	return f
}

func diffRules(prev, cur []*rules.Rule) ([]rules.Rule, []string) {
	put, del := diff(prev, cur, ruleID)
	ids := make([]string, len(del))
	for i, k := range del {
		ids[i] = k.Rule
	}
	return put, ids
}

func (f snapshotFile) decode() ([]*version, error) {
	if f.Format != snapshotFormat {
		return nil, fmt.Errorf("rules store: restore snapshot: unknown format %d", f.Format)
	}
	hist := make([]*version, 0, len(f.Versions))
	prev := &version{}
	for _, sv := range f.Versions {
		if sv.Version <= prev.Version && len(hist) > 0 {
			return nil, fmt.Errorf("rules store: restore snapshot: version %d after %d", sv.Version, prev.Version)
		}
		del := make([]overrideKey, len(sv.DelRules))
		for i, id := range sv.DelRules {
			del[i] = overrideKey{Rule: id}
		}
		v := &version{
			HistoryEntry: sv.HistoryEntry,
			prev:         sv.Prev,
			rules:        patch(prev.rules, sv.PutRules, del, ruleID),
			overrides:    patch(prev.overrides, sv.PutOverrides, sv.DelOverrides, overrideID),
		}
		hist = append(hist, v)
		compactBeforeHead(hist)
		prev = v
	}
	return hist, nil
}

type fsmSnapshot struct {
	hist []*version
}

// Persist writes the snapshot as JSON.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriter(sink)
	err := json.NewEncoder(w).Encode(encodeSnapshot(s.hist))
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("rules store: persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release does nothing: the snapshot holds only immutable versions.
func (s *fsmSnapshot) Release() {}

var _ raft.FSMSnapshot = (*fsmSnapshot)(nil)
