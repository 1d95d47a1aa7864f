package rulesraft

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/weirlimit/weir/rulesraft/rules"
)

func manyRules(n int) []rules.Rule {
	rs := make([]rules.Rule, n)
	for i := range rs {
		rs[i] = rule(fmt.Sprintf("r%05d", i), 10)
	}
	return rs
}

// A rule set may hold rules.MaxRules rules and not one more: the write
// that would pass the limit is refused with a clear error and changes
// nothing.
func TestFSMRulesPerSetLimit(t *testing.T) {
	h := newHarness(t, 0)
	v := h.mustApply(Command{Op: OpApply, Rules: manyRules(rules.MaxRules)})
	res := h.apply(Command{Op: OpApply, Rules: []rules.Rule{rule("one-more", 1)}})
	if !errors.Is(res.Err, ErrInvalid) || !strings.Contains(res.Err.Error(), "at most 10000") {
		t.Fatalf("apply past the limit: err = %v, want ErrInvalid naming the limit", res.Err)
	}
	if cur := h.f.Current(); cur.Version != v || len(cur.Rules) != rules.MaxRules {
		t.Fatalf("after the refused write: version %d with %d rules, want %d with %d", cur.Version, len(cur.Rules), v, rules.MaxRules)
	}
	// Replacing one rule of a full set is fine.
	h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("r00007", 99)}})
	// A file of more rules than the limit is refused before it is sent.
	if err := rules.Validate(manyRules(rules.MaxRules + 1)); err == nil || !strings.Contains(err.Error(), "at most 10000") {
		t.Fatalf("Validate of %d rules: %v", rules.MaxRules+1, err)
	}
}

// A kept version costs memory in proportion to what it changed: on a full
// set of 10,000 rules, 100 one-rule writes keep well under 20 KiB each
// (a flat copy of the rule pointers alone would be 80 KiB a version).
func TestFSMLargeSetHistoryMemory(t *testing.T) {
	h := newHarness(t, 0)
	h.mustApply(Command{Op: OpApply, Rules: manyRules(rules.MaxRules)})
	h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("r00000", 11)}})
	const writes = 100
	before := heapAfterGC()
	for i := range writes {
		h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule(fmt.Sprintf("r%05d", (i*37)%rules.MaxRules), int64(i+12))}})
	}
	after := heapAfterGC()
	per := (int64(after) - int64(before)) / writes
	t.Logf("retained heap per one-rule version on a %d-rule set: %d bytes", rules.MaxRules, per)
	if per > 20<<10 {
		t.Fatalf("each version keeps %d bytes, want < 20 KiB", per)
	}
	// Every kept version still reads back whole.
	for _, e := range h.f.History(0)[:5] {
		s, err := h.f.SetAt(e.Version)
		if err != nil || len(s.Rules) != rules.MaxRules {
			t.Fatalf("SetAt(%d): %d rules, %v", e.Version, len(s.Rules), err)
		}
	}
	runtime.KeepAlive(h)
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Inserting or deleting one element changes only the piece it falls in.
func TestPiecesShareAcrossInsertAndDelete(t *testing.T) {
	rs := manyRules(5000)
	flat := make([]*rules.Rule, len(rs))
	for i := range rs {
		flat[i] = &rs[i]
	}
	base := toPieces(flat, ruleKey, nil)
	if got := base.flat(); !slices.Equal(got, flat) {
		t.Fatalf("flat() does not give back the list")
	}
	extra := rule("r02500x", 1)
	ins := slices.Insert(slices.Clone(flat), 2501, &extra)
	del := slices.Delete(slices.Clone(flat), 100, 101)
	for name, l := range map[string][]*rules.Rule{"insert": ins, "delete": del} {
		ps := toPieces(l, ruleKey, base)
		if !slices.Equal(ps.flat(), l) {
			t.Fatalf("%s: flat() does not give back the list", name)
		}
		shared := map[*piece[rules.Rule]]bool{}
		for _, p := range base {
			shared[p] = true
		}
		fresh := 0
		for _, p := range ps {
			if !shared[p] {
				fresh++
			}
		}
		if fresh > 2 {
			t.Fatalf("%s: %d of %d pieces are new, want at most 2", name, fresh, len(ps))
		}
	}
}

// BenchmarkFSMApplyLargeSet measures one single-rule upsert on a full set
// (rules.MaxRules rules) with a full history.
func BenchmarkFSMApplyLargeSet(b *testing.B) {
	f := NewFSM(DefaultHistoryLimit)
	h := &harness{f: f}
	apply := func(c Command) {
		c.At = t0
		data, _ := encodeCommand(c)
		h.idx++
		if res := f.Apply(&raft.Log{Index: h.idx, Type: raft.LogCommand, Data: data}).(Result); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	apply(Command{Op: OpApply, Rules: manyRules(rules.MaxRules)})
	for i := range DefaultHistoryLimit {
		apply(Command{Op: OpApply, Rules: []rules.Rule{rule(fmt.Sprintf("r%05d", i), int64(i+11))}})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		apply(Command{Op: OpApply, Rules: []rules.Rule{rule(fmt.Sprintf("r%05d", i%rules.MaxRules), int64(i+1))}})
	}
}

// A set may hold rules.MaxOverrides overrides: one more is refused with a
// clear error and changes nothing; replacing an existing one still works.
func TestFSMOverridesPerSetLimit(t *testing.T) {
	h := newHarness(t, 0)
	h.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("r", 10)}})
	// Fill the head directly (100,000 commands would take long), as a
	// restored snapshot would.
	h.f.mu.Lock()
	ovs := make([]*rules.Override, rules.MaxOverrides)
	for i := range ovs {
		ovs[i] = &rules.Override{Rule: "r", Key: fmt.Sprintf("apikey:%06d", i), Rate: 1}
	}
	head := *h.f.head
	head.overrides = ovs
	h.f.head = &head
	h.f.mu.Unlock()
	res := h.apply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "r", Key: "apikey:new", Rate: 2}})
	if !errors.Is(res.Err, ErrInvalid) || !strings.Contains(res.Err.Error(), "at most 100000 overrides") {
		t.Fatalf("override past the limit: %v", res.Err)
	}
	h.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "r", Key: "apikey:000007", Rate: 3}})
}
