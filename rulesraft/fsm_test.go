package rulesraft

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/weirlimit/weir/rulesraft/rules"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func rule(id string, rate int64) rules.Rule {
	return rules.Rule{
		ID:     id,
		Match:  rules.Match{Route: "/v1/" + id},
		Key:    rules.KeyAPIKey,
		Rate:   rate,
		Period: rules.Duration(time.Second),
	}
}

// harness feeds commands to an FSM as Raft would, with increasing indexes.
type harness struct {
	t   *testing.T
	f   *FSM
	idx uint64
}

func newHarness(t *testing.T, limit int) *harness {
	return &harness{t: t, f: NewFSM(limit)}
}

func (h *harness) apply(c Command) Result {
	h.t.Helper()
	if c.At.IsZero() {
		c.At = t0
	}
	data, err := encodeCommand(c)
	if err != nil {
		h.t.Fatal(err)
	}
	h.idx++
	res, ok := h.f.Apply(&raft.Log{Index: h.idx, Type: raft.LogCommand, Data: data}).(Result)
	if !ok {
		h.t.Fatalf("Apply returned %T", res)
	}
	return res
}

func (h *harness) mustApply(c Command) uint64 {
	h.t.Helper()
	res := h.apply(c)
	if res.Err != nil {
		h.t.Fatalf("%s: %v", c.Op, res.Err)
	}
	return res.Version
}

func ids(s *rules.Set) []string {
	var out []string
	for _, r := range s.Rules {
		out = append(out, r.ID)
	}
	return out
}

func ovKeys(s *rules.Set) []string {
	var out []string
	for _, o := range s.Overrides {
		out = append(out, o.Rule+"/"+o.Key)
	}
	return out
}

func TestFSMApplyDeleteOverride(t *testing.T) {
	h := newHarness(t, 0)
	if v := h.f.Current().Version; v != 0 {
		t.Fatalf("empty FSM version = %d, want 0", v)
	}
	v1 := h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("b", 10), rule("a", 5)}, Author: "ann"})
	cur := h.f.Current()
	if v1 != 1 || cur.Version != 1 {
		t.Fatalf("version = %d, set version %d; want the log index 1", v1, cur.Version)
	}
	if got := ids(cur); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("rules = %v, want sorted [a b]", got)
	}
	if want := rules.Normalize(rule("a", 5)); !cur.Rules[0].Equal(want) {
		t.Fatalf("stored rule = %+v, want normalized %+v", cur.Rules[0], want)
	}

	// Upsert one, add one: the other stays.
	h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 7), rule("c", 1)}})
	if got := ids(h.f.Current()); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Fatalf("after upsert rules = %v", got)
	}
	if r, _ := h.f.Current().Rule("a"); r.Rate != 7 {
		t.Fatalf("a.rate = %d, want 7", r.Rate)
	}

	h.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "b", Key: "ak_1", Rate: 100}})
	h.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "a", Key: "ak_2", Block: true}})
	h.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "b", Key: "ak_1", Rate: 200}})
	if got := ovKeys(h.f.Current()); !reflect.DeepEqual(got, []string{"a/ak_2", "b/ak_1"}) {
		t.Fatalf("overrides = %v", got)
	}
	if o, _ := h.f.Current().Override("b", "ak_1"); o.Rate != 200 {
		t.Fatalf("override replaced: rate %d, want 200", o.Rate)
	}

	// Deleting a rule drops its overrides.
	h.mustApply(Command{Op: OpDeleteRule, ID: "b"})
	if got, gotO := ids(h.f.Current()), ovKeys(h.f.Current()); !reflect.DeepEqual(got, []string{"a", "c"}) || !reflect.DeepEqual(gotO, []string{"a/ak_2"}) {
		t.Fatalf("after delete: rules %v overrides %v", got, gotO)
	}
	h.mustApply(Command{Op: OpDeleteOverride, Rule: "a", Key: "ak_2"})
	if n := len(h.f.Current().Overrides); n != 0 {
		t.Fatalf("%d overrides left", n)
	}

	// Replace all: exactly the given rules.
	v := h.mustApply(Command{Op: OpApply, ReplaceAll: true, Rules: []rules.Rule{rule("z", 3)}})
	if got := ids(h.f.Current()); !reflect.DeepEqual(got, []string{"z"}) {
		t.Fatalf("after replace all: %v", got)
	}
	hist := h.f.History(0)
	if len(hist) != 8 || hist[0].Version != v || hist[7].Version != v1 || hist[7].Author != "ann" || !hist[7].At.Equal(t0) {
		t.Fatalf("history = %+v", hist)
	}
	if hist[0].Summary != "replace all 1 rule(s): added z; removed a, c" {
		t.Fatalf("summary = %q", hist[0].Summary)
	}
	if got := h.f.History(2); len(got) != 2 || got[0].Version != v {
		t.Fatalf("History(2) = %+v", got)
	}
	if s0, err := h.f.SetAt(0); err != nil || s0.Version != 0 || len(s0.Rules) != 0 {
		t.Fatalf("SetAt(0) = %+v, %v; want the empty start", s0, err)
	}
}

func TestFSMRejectedCommandsChangeNothing(t *testing.T) {
	h := newHarness(t, 0)
	h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 5), rule("b", 5)}})
	h.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "a", Key: "k", Rate: 9, ExpiresAt: t0.Add(time.Hour)}})
	bad := rule("c", 0) // rate 0
	cases := []struct {
		name string
		cmd  Command
		want error
	}{
		{"unknown op", Command{Op: "explode"}, ErrInvalid},
		{"apply nothing", Command{Op: OpApply}, ErrInvalid},
		{"invalid rule", Command{Op: OpApply, Rules: []rules.Rule{rule("c", 1), bad}}, ErrInvalid},
		{"duplicate id", Command{Op: OpApply, Rules: []rules.Rule{rule("c", 1), rule("c", 2)}}, ErrInvalid},
		{"replace all with invalid", Command{Op: OpApply, ReplaceAll: true, Rules: []rules.Rule{bad}}, ErrInvalid},
		{"delete unknown rule", Command{Op: OpDeleteRule, ID: "nope"}, ErrNotFound},
		{"override unknown rule", Command{Op: OpSetOverride, Override: &rules.Override{Rule: "nope", Key: "k", Rate: 1}}, ErrNotFound},
		{"override missing", Command{Op: OpSetOverride}, ErrInvalid},
		{"override invalid", Command{Op: OpSetOverride, Override: &rules.Override{Rule: "a", Key: "", Rate: 1}}, ErrInvalid},
		{"override expired", Command{Op: OpSetOverride, Override: &rules.Override{Rule: "a", Key: "k2", Rate: 1, ExpiresAt: t0}}, ErrInvalid},
		{"delete unknown override", Command{Op: OpDeleteOverride, Rule: "a", Key: "zz"}, ErrNotFound},
		{"rollback to future", Command{Op: OpRollback, Version: 99}, ErrNotFound},
	}
	before := h.f.Current()
	histBefore := h.f.History(0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := h.apply(tc.cmd)
			if !errors.Is(res.Err, tc.want) {
				t.Fatalf("err = %v, want %v", res.Err, tc.want)
			}
			if res.Version != before.Version {
				t.Fatalf("result version %d, want unchanged %d", res.Version, before.Version)
			}
			if h.f.Current() != before {
				t.Fatalf("current set replaced by a rejected command")
			}
		})
	}
	// What a user reads names the thing, not this package.
	for cmd, want := range map[*Command]string{
		{Op: OpDeleteRule, ID: "nope"}: `rule "nope" not found`,
		{Op: OpRollback, Version: 99}:  "version 99 not found (the current version is",
		{Op: OpSetOverride, Override: &rules.Override{Rule: "nope", Key: "k", Rate: 1}}: `override for rule "nope": rule not found`,
	} {
		if err := h.apply(*cmd).Err; err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "rulesraft") {
			t.Errorf("%s: %v; want %q and no package name", cmd.Op, err, want)
		}
	}
	// Undecodable data.
	h.idx++
	res := h.f.Apply(&raft.Log{Index: h.idx, Data: []byte("{not json")}).(Result)
	if !errors.Is(res.Err, ErrInvalid) || h.f.Current() != before {
		t.Fatalf("garbage: %+v", res)
	}
	if got := h.f.History(0); !reflect.DeepEqual(got, histBefore) {
		t.Fatalf("history changed: %+v", got)
	}
	// The rules package's validation error is still reachable.
	res = h.apply(Command{Op: OpApply, Rules: []rules.Rule{bad}})
	var ve *rules.ValidationError
	if !errors.As(res.Err, &ve) {
		t.Fatalf("err %v does not carry *rules.ValidationError", res.Err)
	}
}

func TestFSMOverrideExpiryFollowsCommandTime(t *testing.T) {
	h := newHarness(t, 0)
	h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 5)}})
	exp := t0.Add(10 * time.Second)
	h.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "a", Key: "k", Rate: 50, ExpiresAt: exp}})
	h.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "a", Key: "forever", Rate: 60}})

	// A command stamped before expiry keeps it.
	h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("b", 1)}, At: exp.Add(-time.Nanosecond)})
	if n := len(h.f.Current().Overrides); n != 2 {
		t.Fatalf("%d overrides before expiry, want 2", n)
	}
	// A noop with nothing to prune makes no version.
	before := h.f.Current().Version
	if res := h.apply(Command{Op: OpNoop, At: exp.Add(-time.Nanosecond)}); res.Err != nil || res.Version != before || h.f.Current().Version != before {
		t.Fatalf("idle noop made a version: %+v", res)
	}
	// A noop stamped at expiry prunes it, as a new version.
	res := h.apply(Command{Op: OpNoop, At: exp})
	if res.Err != nil || res.Version == before {
		t.Fatalf("pruning noop: %+v", res)
	}
	if got := ovKeys(h.f.Current()); !reflect.DeepEqual(got, []string{"a/forever"}) {
		t.Fatalf("overrides after expiry = %v", got)
	}
	if s := h.f.History(1)[0].Summary; s != "1 expired override(s) pruned" {
		t.Fatalf("summary %q", s)
	}
}

func TestFSMRollbackRestoresExactly(t *testing.T) {
	h := newHarness(t, 0)
	var versions []uint64
	snap := map[uint64]*rules.Set{}
	step := func(c Command) {
		v := h.mustApply(c)
		versions = append(versions, v)
		snap[v] = h.f.Current()
	}
	step(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 1), rule("b", 2)}})
	step(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "a", Key: "k1", Rate: 10}})
	step(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 3), rule("c", 4)}})
	step(Command{Op: OpDeleteRule, ID: "b"})
	step(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "c", Key: "k2", Block: true}})
	step(Command{Op: OpApply, ReplaceAll: true, Rules: []rules.Rule{rule("d", 9)}})

	for _, target := range versions {
		v := h.mustApply(Command{Op: OpRollback, Version: target, Author: "ops"})
		got, want := h.f.Current(), snap[target]
		if got.Version != v || v <= target {
			t.Fatalf("rollback to %d: version %d (set %d)", target, v, got.Version)
		}
		if !reflect.DeepEqual(got.Rules, want.Rules) || !reflect.DeepEqual(got.Overrides, want.Overrides) {
			t.Fatalf("rollback to %d:\n got %+v %+v\nwant %+v %+v", target, got.Rules, got.Overrides, want.Rules, want.Overrides)
		}
		if e := h.f.History(1)[0]; e.Summary != fmt.Sprintf("rollback to version %d", target) || e.Author != "ops" {
			t.Fatalf("history entry %+v", e)
		}
		// SetAt agrees with what was current then.
		if at, err := h.f.SetAt(target); err != nil || !reflect.DeepEqual(at, want) {
			t.Fatalf("SetAt(%d) = %+v, %v", target, at, err)
		}
	}
}

func TestFSMHistoryBoundAndSharing(t *testing.T) {
	h := newHarness(t, 5)
	h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("keep", 1), rule("x", 1)}})
	for i := range 11 {
		h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("x", int64(i+2))}})
	}
	hist := h.f.History(0)
	if len(hist) != 5 || hist[0].Version != 12 || hist[4].Version != 8 {
		t.Fatalf("history = %+v, want versions 12..8", hist)
	}
	if _, err := h.f.SetAt(0); !errors.Is(err, ErrVersionGone) {
		t.Fatalf("SetAt(0) err = %v, want ErrVersionGone", err)
	}
	if _, err := h.f.SetAt(7); !errors.Is(err, ErrVersionGone) {
		t.Fatalf("SetAt(7) err = %v, want ErrVersionGone", err)
	}
	if res := h.apply(Command{Op: OpRollback, Version: 3}); !errors.Is(res.Err, ErrVersionGone) {
		t.Fatalf("rollback to trimmed version: %v", res.Err)
	}
	if _, err := h.f.SetAt(8); err != nil {
		t.Fatalf("SetAt(8): %v", err)
	}
	// The unchanged rule is one allocation shared by every kept version.
	h.f.mu.RLock()
	defer h.f.mu.RUnlock()
	r0, _ := h.f.hist[0].lists()
	r1, _ := h.f.hist[1].lists()
	for _, v := range h.f.hist {
		rs, _ := v.lists()
		if rs[0] != r0[0] || rs[0].ID != "keep" {
			t.Fatalf("version %d does not share rule keep", v.Version)
		}
	}
	if r0[1] == r1[1] {
		t.Fatalf("changed rule x shared between versions")
	}
}

func TestFSMNoChangeSharesSlices(t *testing.T) {
	h := newHarness(t, 0)
	h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 1)}})
	h.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "a", Key: "k", Rate: 2}})
	h.f.mu.RLock()
	defer h.f.mu.RUnlock()
	if !h.f.hist[0].compacted || h.f.hist[1].compacted {
		t.Fatalf("the version before the head is not compacted, or the head is")
	}
	if h.f.hist[0].rulePieces[0] != h.f.hist[1].compact(h.f.hist[0]).rulePieces[0] {
		t.Fatalf("an override change copied the rules")
	}
}

// snapshotRoundTrip persists f through Raft's in-memory snapshot store and
// restores it into a new FSM with the given limit.
func snapshotRoundTrip(t *testing.T, f *FSM, limit int) *FSM {
	t.Helper()
	store := raft.NewInmemSnapshotStore()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink, err := store.Create(raft.SnapshotVersionMax, f.Current().Version, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	metas, err := store.List()
	if err != nil || len(metas) != 1 {
		t.Fatalf("list: %v %v", metas, err)
	}
	_, rc, err := store.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	g := NewFSM(limit)
	if err := g.Restore(rc); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestFSMSnapshotRestore(t *testing.T) {
	h := newHarness(t, 0)
	h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 1), rule("b", 2), rule("c", 3)}, Author: "ann"})
	h.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "a", Key: "k1", Rate: 10, ExpiresAt: t0.Add(time.Hour)}})
	h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("b", 20)}})
	h.mustApply(Command{Op: OpDeleteRule, ID: "c"})
	h.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "b", Key: "k2", Block: true}})
	h.mustApply(Command{Op: OpRollback, Version: 2})
	h.mustApply(Command{Op: OpDeleteOverride, Rule: "a", Key: "k1"})

	g := snapshotRoundTrip(t, h.f, 0)
	if !reflect.DeepEqual(g.Current(), h.f.Current()) {
		t.Fatalf("current differs:\n got %+v\nwant %+v", g.Current(), h.f.Current())
	}
	if !reflect.DeepEqual(g.History(0), h.f.History(0)) {
		t.Fatalf("history differs:\n got %+v\nwant %+v", g.History(0), h.f.History(0))
	}
	for _, e := range h.f.History(0) {
		want, _ := h.f.SetAt(e.Version)
		got, err := g.SetAt(e.Version)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("SetAt(%d) after restore = %+v, %v; want %+v", e.Version, got, err, want)
		}
	}
	// Restored versions share unchanged rules again.
	g0, _ := g.hist[0].lists()
	g1, _ := g.hist[1].lists()
	if g0[0] != g1[0] {
		t.Fatalf("restore lost sharing of rule a between versions 1 and 2")
	}
	// The restored FSM goes on applying (versions continue from the log).
	h2 := &harness{t: t, f: g, idx: h.idx}
	h2.mustApply(Command{Op: OpRollback, Version: 1})
	if got := ids(g.Current()); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Fatalf("rollback after restore: %v", got)
	}

	// A member with a smaller history limit keeps the newest versions.
	small := snapshotRoundTrip(t, h.f, 3)
	if hs := small.History(0); len(hs) != 3 || hs[0].Version != 7 || !reflect.DeepEqual(small.Current(), h.f.Current()) {
		t.Fatalf("limited restore: %+v", hs)
	}

	// An empty FSM round-trips to version 0.
	if e := snapshotRoundTrip(t, NewFSM(0), 0); e.Current().Version != 0 || len(e.History(0)) != 0 {
		t.Fatalf("empty restore: %+v", e.Current())
	}
}

func TestFSMRestoreRejectsGarbage(t *testing.T) {
	f := NewFSM(0)
	for _, in := range []string{"nope", `{"format":99,"versions":[]}`} {
		if err := f.Restore(io.NopCloser(stringsReader(in))); err == nil {
			t.Fatalf("Restore(%q) succeeded", in)
		}
	}
}

func TestWatchNextAfter(t *testing.T) {
	h := newHarness(t, 3)
	for i := range 10 {
		h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("a", int64(i+1))}})
		h.idx++ // leave gaps in the log indexes, as configuration entries do
	}
	// History holds versions 15, 17, 19 (indexes 1, 3, 5, ...).
	cases := []struct{ last, want uint64 }{
		{17, 19}, // next in history
		{15, 17},
		{13, 15}, // 15 was made from 13
		{11, 19}, // what followed 11 is gone from history: skip to current
		{0, 19},
		{16, 19}, // not a version at all: current
	}
	for _, tc := range cases {
		v, cur, wait := h.f.nextAfter(tc.last)
		if v == nil || v.Version != tc.want || wait != nil {
			t.Fatalf("nextAfter(%d) = %v, want %d", tc.last, v, tc.want)
		}
		if isHead := tc.want == 19; (cur == h.f.Current()) != isHead || (cur == nil) == isHead {
			t.Fatalf("nextAfter(%d): published set %p, want it only for the head", tc.last, cur)
		}
	}
	if v, _, wait := h.f.nextAfter(19); v != nil || wait == nil {
		t.Fatalf("nextAfter(current) = %v, want wait", v)
	}
}

func stringsReader(s string) io.Reader { return &stringReader{s: s} }

type stringReader struct{ s string }

func (r *stringReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p, r.s)
	r.s = r.s[n:]
	return n, nil
}

// BenchmarkFSMApply measures one single-rule upsert on a 1,000-rule set with
// a full 1,000-version history (validation, sharing, publishing).
func BenchmarkFSMApply(b *testing.B) {
	f := NewFSM(DefaultHistoryLimit)
	var idx uint64
	apply := func(c Command) {
		data, _ := encodeCommand(c)
		idx++
		if res := f.Apply(&raft.Log{Index: idx, Data: data}).(Result); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	var all []rules.Rule
	for i := range 1000 {
		all = append(all, rule(fmt.Sprintf("r%04d", i), 10))
	}
	apply(Command{Op: OpApply, Rules: all, At: t0})
	for i := range DefaultHistoryLimit {
		apply(Command{Op: OpApply, Rules: []rules.Rule{rule(fmt.Sprintf("r%04d", i), int64(i+11))}, At: t0})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		apply(Command{Op: OpApply, Rules: []rules.Rule{rule(fmt.Sprintf("r%04d", i%1000), int64(i+1))}, At: t0})
	}
}
