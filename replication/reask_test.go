package replication

import (
	"context"
	"testing"
)

// heldPeers is directPeers whose asks by one puller of one node wait for
// a gate; asked is closed when that ask arrives.
type heldPeers struct {
	*directPeers
	by, of string
	asked  chan struct{}
	gate   chan struct{}
}

func (g heldPeers) Handoff(ctx context.Context, addr string, req HandoffRequest) (HandoffReply, error) {
	if addr == g.of && req.To == g.by {
		close(g.asked)
		select {
		case <-g.gate:
		case <-ctx.Done():
			return HandoffReply{}, ctx.Err()
		}
	}
	return g.directPeers.Handoff(ctx, addr, req)
}

// The simulator's two-rings seed 2126 (5 nodes, old ring): a restarted
// puller a asks b, the owner before it by a's ring, before b has seen the
// ring that gave b the partition, and b answers nothing. b then pulls the
// counters from their holder d, whose mark names b when a's broadcast
// asks d. b was asked already, so a settled from copies (none here: a
// full bucket) while b held the spent counter. Now a asks a node a mark
// names again when its earlier answer was nothing: b hands the counter
// over.
func TestPullReasksNodeThatPulledSince(t *testing.T) {
	ctx := context.Background()
	direct := &directPeers{nodes: map[string]*Handoff{}}
	peers := heldPeers{directPeers: direct, by: "a", of: "d", asked: make(chan struct{}), gate: make(chan struct{})}
	ca, cb, cd := newMemCounters(), newMemCounters(), newMemCounters()
	spent := State{ID: 7, Partition: 0, A: 1, B: 3}
	if err := cd.Import(ctx, []State{spent}); err != nil {
		t.Fatal(err)
	}
	a := startHandoff(t, "a", 1, ca, peers)
	b := startHandoff(t, "b", 1, cb, peers)
	d := startHandoff(t, "d", 1, cd, peers)
	direct.nodes["a"], direct.nodes["b"], direct.nodes["d"] = a, b, d
	all := map[string]string{"a": "a", "b": "b", "d": "d"}
	byD := []Assignment{{Owner: "d", Replicas: []string{"d"}}}
	byB := []Assignment{{Owner: "b", Replicas: []string{"b"}}}
	byA := []Assignment{{Owner: "a", Replicas: []string{"a"}}}
	for _, h := range []*Handoff{d, b} {
		if err := h.ChangeRing(ctx, RingChanged{Place: byD, Members: []string{"b", "d"}, Live: all}); err != nil {
			t.Fatal(err)
		}
	}
	// a's ring skipped b's: it pulls p0 from b, which answers nothing,
	// then asks everyone else: d, whose answer waits.
	if err := a.ChangeRing(ctx, RingChanged{Place: byA, Members: []string{"a", "b", "d"}, Live: all, Base: byB}); err != nil {
		t.Fatal(err)
	}
	<-peers.asked
	// b now sees the ring that gave it p0 and pulls it from d.
	if err := b.ChangeRing(ctx, RingChanged{Place: byB, Members: []string{"b", "d"}, Live: all}); err != nil {
		t.Fatal(err)
	}
	waitState(t, b, 0, PartReady)
	waitState(t, d, 0, PartMoved)
	close(peers.gate) // d answers a: moved to b
	waitState(t, a, 0, PartReady)
	if got := ca.get(0); len(got) != 1 || got[0].ID != spent.ID || got[0].B != spent.B {
		t.Errorf("a's p0: %v, want the spent counter %v", got, spent)
	}
	if st, peer := b.Routes().State(0); st != PartMoved || peer != "a" {
		t.Errorf("b's p0: %s %q, want moved to a", st, peer)
	}
	if got := cb.get(0); len(got) != 0 {
		t.Errorf("b kept p0's counters after handing them to a: %v", got)
	}
}

// The simulator's two-rings seed 420 of 5 nodes: a joiner a pulls p0
// from b, which holds it released and replicates its decisions to a (a
// replica by b's ring). b dies before a's ask reaches it, so a settles
// from copies: c's, kept past its placement and older, won over the
// copies b itself had sent a (hot0 from a nearly full bucket). Copies
// from the source asked first come first now.
func TestPullPrefersCopiesFromItsSource(t *testing.T) {
	ctx := context.Background()
	direct := &directPeers{nodes: map[string]*Handoff{}}
	ca := newMemCounters()
	spent := spentState
	storeA, storeC := storeWith(t, "b", spent), storeWith(t, "d", olderState)
	a := runHandoff(t, DefaultHandoffConfig("a", 1), ca, direct, storeA)
	c := runHandoff(t, DefaultHandoffConfig("c", 1), newMemCounters(), direct, storeC)
	direct.nodes["a"], direct.nodes["c"] = a, c // b is dead: its asks fail
	live := map[string]string{"a": "a", "b": "b", "c": "c"}
	if err := a.ChangeRing(ctx, RingChanged{Place: []Assignment{{Owner: "b", Replicas: []string{"b", "a"}}}, Members: []string{"a", "b", "c"}, Live: live}); err != nil {
		t.Fatal(err)
	}
	if err := a.ChangeRing(ctx, RingChanged{Place: []Assignment{{Owner: "a", Replicas: []string{"a", "c"}}}, Members: []string{"a", "b", "c"}, Live: live}); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, 0, PartReady)
	if got := ca.get(0); len(got) != 1 || got[0].B != spent.B {
		t.Errorf("a's p0: %v, want b's own last state %v", got, spent)
	}
}

// spentState and olderState are one counter's state and an older one of
// it (more tokens left): which of them a pull installs tells whose it took.
var (
	spentState = State{ID: 7, Partition: 0, A: 1, B: 3}
	olderState = State{ID: 7, Partition: 0, A: 1, B: 9}
)

// storeWith returns a replica store holding st as a copy sent by from.
func storeWith(t *testing.T, from string, st State) *Store {
	t.Helper()
	s := NewStore()
	if err := s.Apply(from, []State{st}); err != nil {
		t.Fatal(err)
	}
	return s
}

// The simulator's seed 19000062 of 3 nodes: a restarted puller a asks b,
// whose mark names a itself (b handed the counters to a's earlier
// incarnation, and keeps that incarnation's replica copies). Nobody else
// was named, so a asked every member, and c handed over the counters a
// view fault had left it, released and never pulled (their owner b never
// stopped serving the partition): they won as a holder's over b's copies
// of the live line, and a spent key came back with tokens. A holder found
// after a mark names this node now counts as copies, after the others.
func TestPullTakesLeftoversAsCopiesAfterItsOwnMark(t *testing.T) {
	ctx := context.Background()
	direct := &directPeers{nodes: map[string]*Handoff{}}
	spent, stale := spentState, olderState
	ca, cc := newMemCounters(), newMemCounters()
	storeB := storeWith(t, "a", spent)
	b := runHandoff(t, DefaultHandoffConfig("b", 1), newMemCounters(), direct, storeB)
	c := runHandoff(t, DefaultHandoffConfig("c", 1), cc, direct, NewStore())
	direct.nodes["b"], direct.nodes["c"] = b, c
	all := map[string]string{"a": "a", "b": "b", "c": "c"}
	byB := []Assignment{{Owner: "b", Replicas: []string{"b", "a"}}}
	byC := []Assignment{{Owner: "c", Replicas: []string{"c"}}}
	if err := b.ChangeRing(ctx, RingChanged{Place: byB, Members: []string{"b"}, Live: all}); err != nil {
		t.Fatal(err)
	}
	// a's earlier incarnation pulled p0 from b.
	if r, err := b.Serve(ctx, HandoffRequest{To: "a", Parts: []uint32{0}}); err != nil || len(r.Held) != 1 {
		t.Fatalf("b's hand-off to a: %+v, %v", r, err)
	}
	// c served p0 alone for a while (a view without b) and gave it back.
	if err := c.ChangeRing(ctx, RingChanged{Place: byC, Members: []string{"c"}, Live: all}); err != nil {
		t.Fatal(err)
	}
	if err := cc.Import(ctx, []State{stale}); err != nil {
		t.Fatal(err)
	}
	if err := c.ChangeRing(ctx, RingChanged{Place: byB, Members: []string{"b", "c"}, Live: all}); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, 0, PartReleased)
	// a restarted: its first ring takes p0 from b.
	a := runHandoff(t, DefaultHandoffConfig("a", 1), ca, direct, NewStore())
	direct.nodes["a"] = a
	if err := a.ChangeRing(ctx, RingChanged{Place: []Assignment{{Owner: "a", Replicas: []string{"a", "b"}}}, Members: []string{"a", "b", "c"}, Live: all, Base: byB}); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, 0, PartReady)
	if got := ca.get(0); len(got) != 1 || got[0].B != spent.B {
		t.Errorf("a's p0: %v, want b's copy of the live line %v", got, spent)
	}
}

// A mark naming the puller is not always an earlier incarnation's: a
// puller that handed the partition on itself (to c) and lost its own mark
// (a ring with a base drops them) is named by its source, b, and c, found
// by the asks to every member, is the next holder on the chain: its
// counters win, not b's older copy.
func TestPullFollowsItsOwnHandOnAfterItsOwnMark(t *testing.T) {
	ctx := context.Background()
	direct := &directPeers{nodes: map[string]*Handoff{}}
	live := spentState
	ca, cc := newMemCounters(), newMemCounters()
	storeB := storeWith(t, "a", olderState)
	a := runHandoff(t, DefaultHandoffConfig("a", 1), ca, direct, NewStore())
	b := runHandoff(t, DefaultHandoffConfig("b", 1), newMemCounters(), direct, storeB)
	c := runHandoff(t, DefaultHandoffConfig("c", 1), cc, direct, NewStore())
	direct.nodes["a"], direct.nodes["b"], direct.nodes["c"] = a, b, c
	all := map[string]string{"a": "a", "b": "b", "c": "c"}
	for _, x := range []struct {
		h  *Handoff
		id string
	}{{a, "a"}, {b, "b"}, {c, "c"}} {
		if err := x.h.ChangeRing(ctx, RingChanged{Place: []Assignment{{Owner: x.id, Replicas: []string{x.id}}}, Members: []string{x.id}, Live: all}); err != nil {
			t.Fatal(err)
		}
	}
	// b handed p0 to a, and a handed it on to c, which holds its counters.
	for _, x := range []struct {
		from *Handoff
		to   string
	}{{b, "a"}, {a, "c"}} {
		if r, err := x.from.Serve(ctx, HandoffRequest{To: x.to, Parts: []uint32{0}}); err != nil || len(r.Held) != 1 {
			t.Fatalf("hand-off to %s: %+v, %v", x.to, r, err)
		}
	}
	if err := cc.Import(ctx, []State{live}); err != nil {
		t.Fatal(err)
	}
	// Back from a split, a takes p0 over from b, the owner by the base.
	if err := a.ChangeRing(ctx, RingChanged{Place: []Assignment{{Owner: "a", Replicas: []string{"a", "b"}}}, Members: []string{"a", "b", "c"}, Live: all,
		Base: []Assignment{{Owner: "b", Replicas: []string{"b", "a"}}}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, 0, PartReady)
	if got := ca.get(0); len(got) != 1 || got[0].B != live.B {
		t.Errorf("a's p0: %v, want c's counters %v", got, live)
	}
}

// The simulator's fixed-view-leftovers schedule once the replicator
// shipped changes by the ring they were decided on: a puller a asks its
// source b, which passes p0's counters as copies (here a replica's copy of
// the dead owner d's line), and nobody says where else p0 is, so a asks
// every member. c holds p0 released: leftovers a view fault left it, which
// their owner never pulled. As a holder's they won over b's copies of the
// live line; found by the asks to every member after copies came, they
// count as copies, after those.
func TestPullTakesBroadcastHolderAsCopiesAfterCopies(t *testing.T) {
	ctx := context.Background()
	direct := &directPeers{nodes: map[string]*Handoff{}}
	spent, stale := spentState, olderState
	ca, cc := newMemCounters(), newMemCounters()
	b := runHandoff(t, DefaultHandoffConfig("b", 1), newMemCounters(), direct, storeWith(t, "d", spent))
	c := runHandoff(t, DefaultHandoffConfig("c", 1), cc, direct, NewStore())
	direct.nodes["b"], direct.nodes["c"] = b, c // d is dead: its asks fail
	all := map[string]string{"a": "a", "b": "b", "c": "c"}
	byD := []Assignment{{Owner: "d", Replicas: []string{"d", "b"}}}
	// c served p0 alone for a while (a view without d) and gave it back.
	if err := c.ChangeRing(ctx, RingChanged{Place: []Assignment{{Owner: "c", Replicas: []string{"c"}}}, Members: []string{"c"}, Live: all}); err != nil {
		t.Fatal(err)
	}
	if err := cc.Import(ctx, []State{stale}); err != nil {
		t.Fatal(err)
	}
	if err := c.ChangeRing(ctx, RingChanged{Place: byD, Members: []string{"b", "c", "d"}, Live: all}); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, 0, PartReleased)
	// d died; a's ring gives a p0, whose replica was b.
	a := runHandoff(t, DefaultHandoffConfig("a", 1), ca, direct, NewStore())
	direct.nodes["a"] = a
	if err := a.ChangeRing(ctx, RingChanged{Place: byD, Members: []string{"a", "b", "c", "d"}, Live: all}); err != nil {
		t.Fatal(err)
	}
	if err := a.ChangeRing(ctx, RingChanged{Place: []Assignment{{Owner: "a", Replicas: []string{"a", "b"}}}, Members: []string{"a", "b", "c"}, Live: all}); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, 0, PartReady)
	if got := ca.get(0); len(got) != 1 || got[0].B != spent.B {
		t.Errorf("a's p0: %v, want b's copy of the live line %v", got, spent)
	}
}
