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
// whose share moved is kept.
func TestIdleKeysDropped(t *testing.T) {
	names := []string{"a", "b", "c"}
	cfg := DefaultConfig("a", names)
	now := int64(1_000_000_000)
	tab, err := New(cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	const keys = 5_000
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
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

	// A key whose share moved is kept in every region, however long idle.
	s := newSim(t, names...)
	key := keyHomedAt(0, 3)
	for range 8 {
		s.step(key, []int64{0, 100, 0})
	}
	moved := s.shares(key)
	if moved[1] < Whole/2 {
		t.Fatalf("shares %v: b's demand did not move the share", moved)
	}
	for range int(2 * simIdleAfter / time.Duration(interval)) {
		s.step(key, []int64{0, 0, 0})
	}
	for i, tab := range s.tabs {
		if !tab.Has(key) {
			t.Errorf("region %d dropped a key whose share moved (shares were %v)", i, moved)
		}
	}
}
