package replication

import (
	"context"
	"sync/atomic"
	"testing"
)

// gatedPeers is directPeers whose asks of one node wait for a gate; it
// counts the asks that failed.
type gatedPeers struct {
	*directPeers
	slow   string
	gate   chan struct{}
	failed *atomic.Int64
}

func (g gatedPeers) Handoff(ctx context.Context, addr string, req HandoffRequest) (HandoffReply, error) {
	if addr == g.slow {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return HandoffReply{}, ctx.Err()
		}
	}
	r, err := g.directPeers.Handoff(ctx, addr, req)
	if err != nil {
		g.failed.Add(1)
	}
	return r, err
}

// The wait cycle the simulator found (sim/testdata/fixed-wait-cycle.txt):
// a is pulling p0 (from c, which has only a replica copy, the spent
// counter, and answers late) when a ring gives p0 to b, which asks a, the
// old owner by its ring. a's pull, finding no holder at c, asks b. Each
// waited for its own pull before it answered, so both asks timed out: b
// settled p0 from nothing (a full bucket) while a kept the spent counter
// (or got it, by luck, when a's pull and a's wait ended together).
// Now b, whose pull waits on a and which owns p0, answers a at once; a
// settles and hands b what it got.
func TestPullersAskingEachOtherDoNotWait(t *testing.T) {
	ctx := context.Background()
	direct := &directPeers{nodes: map[string]*Handoff{}}
	peers := gatedPeers{directPeers: direct, slow: "c", gate: make(chan struct{}), failed: new(atomic.Int64)}
	ca, cb, cc := newMemCounters(), newMemCounters(), newMemCounters()
	storeC := NewStore()
	spent := State{ID: 7, Partition: 0, A: 1, B: 3}
	if err := storeC.Apply("d", []State{spent}); err != nil {
		t.Fatal(err)
	}
	a := startHandoff(t, "a", 1, ca, peers)
	b := startHandoff(t, "b", 1, cb, peers)
	cfg := DefaultHandoffConfig("c", 1)
	c := runHandoff(t, cfg, cc, peers, storeC)
	direct.nodes["a"], direct.nodes["b"], direct.nodes["c"] = a, b, c
	all := map[string]string{"a": "a", "b": "b", "c": "c"}
	// d owned p0 and died; c has its replica copy. a takes p0 over and
	// pulls it from c.
	old := []Assignment{{Owner: "d", Replicas: []string{"d", "c"}}}
	r1 := []Assignment{{Owner: "a", Replicas: []string{"a", "c"}}}
	if err := a.ChangeRing(ctx, RingChanged{Place: r1, Members: []string{"a", "b", "c"}, Live: all, Base: old}); err != nil {
		t.Fatal(err)
	}
	// The next ring gives p0 to b while a's pull is in flight: a leaves
	// it to that pull; b pulls it from a (b does not see c).
	r2 := []Assignment{{Owner: "b", Replicas: []string{"b", "a"}}}
	if err := a.ChangeRing(ctx, RingChanged{Place: r2, Members: []string{"a", "b"}, Live: all}); err != nil {
		t.Fatal(err)
	}
	if st, peer := a.Routes().State(0); st != PartPending || peer != "c" {
		t.Fatalf("a's p0: %s %q, want pending from c", st, peer)
	}
	if err := b.ChangeRing(ctx, RingChanged{Place: r2, Members: []string{"a", "b"}, Live: map[string]string{"a": "a", "b": "b"}, Base: r1}); err != nil {
		t.Fatal(err)
	}
	close(peers.gate) // c answers a: a replica copy, no holder; a asks b
	waitState(t, b, 0, PartReady)
	waitState(t, a, 0, PartMoved)
	if n := peers.failed.Load(); n > 0 {
		t.Errorf("%d asks failed (timed out waiting on each other)", n)
	}
	if got := cb.get(0); len(got) != 1 || got[0].ID != spent.ID || got[0].B != spent.B {
		t.Errorf("b's p0: %v, want the spent counter %v", got, spent)
	}
	if got := ca.get(0); len(got) != 0 {
		t.Errorf("a kept p0's counters after handing them to b: %v", got)
	}
	if _, peer := a.Routes().State(0); peer != "b" {
		t.Errorf("a's p0 moved to %q, want b", peer)
	}
}
