package share

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestIdleKeysDropped: keys this region stopped asking for are dropped
// IdleAfter after their last ask when their share never moved, and the
// memory comes back; a key asked for again starts where it was; a key
// whose share moved is reset first (TestMovedKeysReset).
func TestIdleKeysDropped(t *testing.T) {
	names := []string{"a", "b", "c"}
	cfg := DefaultConfig("a", names)
	now := int64(1_000_000_000)
	tab, err := New(cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	const keys = 5_000
	h0 := heap()
	shares := map[string]int64{}
	for i := range keys {
		key := fmt.Sprintf("rule\x00key-%d", i)
		tab.Observe(key, 1, 1)
		shares[key] = tab.Share(key)
	}
	tab.Step(now)
	h1 := heap()
	if len(tab.Keys()) != keys {
		t.Fatalf("table holds %d keys, want %d", len(tab.Keys()), keys)
	}
	// Steps with no asks: every key stays until IdleAfter after its last
	// ask, then goes.
	step := int64(cfg.Interval)
	last := now
	reach := func() { // the peers answer every exchange (no key is shared)
		tab.RoundTrip(1, now)
		tab.RoundTrip(2, now)
	}
	for now += step; now-last < int64(cfg.IdleAfter); now += step {
		reach()
		tab.Step(now)
		if got := len(tab.Keys()); got != keys {
			t.Fatalf("at %v after the last ask: %d keys held, want all %d (idle after %v)", time.Duration(now-last), got, keys, cfg.IdleAfter)
		}
	}
	reach()
	tab.Step(now)
	if got := len(tab.Keys()); got != 0 {
		t.Fatalf("at %v after the last ask: %d keys held, want none", time.Duration(now-last), got)
	}
	h2 := heap()
	per := (float64(h1) - float64(h0)) / keys
	back := (float64(h1) - float64(h2)) / keys
	t.Logf("heap: %d B before, %d B with %d keys (%.0f B a key), %d B after the drop (%.0f B a key returned)", h0, h1, keys, per, h2, back)
	if back < per*0.9 {
		t.Errorf("%.0f B a key returned of %.0f B a key held", back, per)
	}
	for key, want := range shares {
		if got := tab.Share(key); got != want {
			t.Fatalf("%q: share %d after the drop, %d before", key, got, want)
		}
		tab.Observe(key, 1, 1)
		if got := tab.Share(key); got != want {
			t.Fatalf("%q: share %d asked for again, %d before", key, got, want)
		}
		break
	}

}

// TestMovedKeysReset: keys whose share moved between regions are reset to
// a new generation once no region has asked for them in IdleAfter, then
// dropped in every region with their memory returned (fake clock); until
// the reset the shares stay as they moved; a late record of the old
// generation is ignored; asked again, a key starts from its initial share.
func TestMovedKeysReset(t *testing.T) {
	names := []string{"a", "b", "c"}
	s := newSim(t, names...)
	const keys = 500
	var list []string
	for i := range keys {
		list = append(list, fmt.Sprintf("rule\x00moved-%d", i))
	}
	h0 := heap()
	// Every region asks for every key in turn, so each key's share moves
	// between all three regions.
	for _, demand := range [][]int64{{100, 0, 0}, {0, 100, 0}, {0, 0, 100}} {
		for range 8 {
			s.stepKeys(list, demand)
		}
	}
	moved := 0
	for _, key := range list {
		if sh := s.shares(key); sh[2] > Whole/2 {
			moved++
		}
		for i, tab := range s.tabs {
			if !tab.Has(key) || idle(&tab.keys[key].recs[i]) {
				t.Fatalf("%q: region %d holds no moved ledger (shares %v)", key, i, s.shares(key))
			}
		}
	}
	if moved != keys {
		t.Fatalf("%d of %d keys moved to c", moved, keys)
	}
	// c's last exchange of the first generation, for ten keys: delivered
	// late, after the reset.
	old := map[string][]Record{}
	for _, key := range list[:10] {
		old[key] = s.sent[len(s.sent)-1][2][key]
	}
	s.sent, s.answers = nil, nil
	h1 := heap()
	quiet := make([]int64, 3)
	idleSteps := int(simIdleAfter / time.Duration(interval))
	// Until IdleAfter after the last ask nothing changes.
	for range idleSteps - 1 {
		s.stepKeys(list, quiet)
	}
	for _, key := range list {
		for i, tab := range s.tabs {
			if !tab.Has(key) || tab.keys[key].gen != 0 {
				t.Fatalf("%q reset or dropped in region %d before IdleAfter", key, i)
			}
		}
	}
	// Then: cap, switch, drop, within a few steps.
	steps := 0
	for ; steps < 20; steps++ {
		s.stepKeys(list, quiet)
		held := 0
		for _, tab := range s.tabs {
			held += len(tab.Keys())
		}
		if held == 0 {
			break
		}
	}
	for i, tab := range s.tabs {
		if n := len(tab.Keys()); n != 0 {
			t.Fatalf("region %d still holds %d of %d moved keys %d steps after IdleAfter", i, n, keys, steps)
		}
		if tab.Resets() != keys {
			t.Errorf("region %d: %d resets, want %d", i, tab.Resets(), keys)
		}
	}
	s.sent, s.answers = nil, nil
	h2 := heap()
	per := (float64(h1) - float64(h0)) / keys
	back := (float64(h1) - float64(h2)) / keys
	t.Logf("heap: %d B before, %d B with %d moved keys in 3 regions (%.0f B a key), %d B %d steps after IdleAfter (%.0f B a key returned; tombstones kept for GoneFor)",
		h0, h1, keys, per, h2, steps+1, back)
	if back < per*0.8 {
		t.Errorf("%.0f B a key returned of %.0f B a key held", back, per)
	}
	// A late exchange of the first generation reaches a: ignored.
	for key, recs := range old {
		s.tabs[0].Merge(2, key, recs)
		s.tabs[0].Take(key, s.now)
	}
	if n := len(s.tabs[0].Keys()); n != 0 {
		t.Fatalf("a late exchange of the old generation brought back %d keys", n)
	}
	// Asked again: the initial shares, in every region.
	key := list[0]
	home := Home(key, 3)
	for i, tab := range s.tabs {
		want := tab.cfg.Floor
		if i == home {
			want = Whole - 2*tab.cfg.Floor
		}
		tab.Observe(key, 1, 1)
		if got := tab.Share(key); got != want {
			t.Errorf("%q asked again in region %d: share %d, want %d", key, i, got, want)
		}
	}
	// After GoneFor, the tombstones go too.
	for range int(simGoneFor/time.Duration(interval)) + 1 {
		s.stepKeys(nil, quiet)
	}
	for i, tab := range s.tabs {
		if n := len(tab.gone); n > 1 {
			t.Errorf("region %d keeps %d tombstones after GoneFor", i, n)
		}
	}
}

// heap is the live heap after a collection, for the memory tests.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
