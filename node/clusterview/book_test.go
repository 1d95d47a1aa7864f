package clusterview

import (
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/weirlimit/weir/ring"
)

// Membership callbacks write the book while the node's loops read it.
func TestBookConcurrentReportAndRead(t *testing.T) {
	b := NewBook("a")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				m := Member{ID: string(rune('b' + w)), State: Alive, Gossip: "g", Boot: 1}
				if i%2 == 1 {
					m.State = Dead
				}
				b.Report(m, epoch.Add(time.Duration(i)*time.Millisecond))
				_ = b.Live()
				_ = b.LostDue(epoch.Add(time.Duration(i) * time.Second))
				_ = b.TakeRejoined()
			}
		}()
	}
	wg.Wait()
	if got := len(b.Live()); got != 0 {
		t.Errorf("every member was last reported dead, %d live", got)
	}
	if got := len(b.Departed()); got != 4 {
		t.Errorf("%d departed, want 4", got)
	}
}

func TestReannounce(t *testing.T) {
	cases := []struct {
		now, conflict time.Duration
		never         bool
		want          bool
	}{
		{now: 10 * time.Second, never: true, want: false},
		{now: 10 * time.Second, conflict: 10 * time.Second, want: true},
		{now: 39 * time.Second, conflict: 10 * time.Second, want: true},
		{now: 40 * time.Second, conflict: 10 * time.Second, want: false},
	}
	for _, c := range cases {
		var at time.Time
		if !c.never {
			at = epoch.Add(c.conflict)
		}
		if got := Reannounce(epoch.Add(c.now), at); got != c.want {
			t.Errorf("now %v, conflict at %v (never %v): %v, want %v", c.now, c.conflict, c.never, got, c.want)
		}
	}
}

// A leaving node marks itself in the members it publishes, not in the
// caller's map (the book's copy or the admitted set).
func TestPolicyLeavingLeavesInputAlone(t *testing.T) {
	cfg := ring.DefaultConfig()
	cfg.PartitionCount = 4
	q := &Quorum{}
	p := &Policy{Self: "a", Ring: cfg, Departures: NewBook("a"), Leader: &leadership{q: q}}
	in := map[string]Member{"a": {ID: "a"}, "b": {ID: "b"}}
	before := maps.Clone(in)
	c, ok, err := p.Step(Input{Members: in, Leaving: true})
	if err != nil || !ok {
		t.Fatalf("step: ok %v, err %v", ok, err)
	}
	if !maps.Equal(in, before) {
		t.Errorf("input changed: %v", in)
	}
	if !c.Members["a"].Leaving || c.Ring.Contains("a") {
		t.Errorf("a leaving: members %v, ring %v", c.Members, c.Ring.Members())
	}
}
