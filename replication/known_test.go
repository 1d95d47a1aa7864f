package replication

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// The known limits of the hand-off that TestClusterBackToBackJoinsKeepCounters
// finds on a loaded machine (docs/design.md, "The same test still fails on a
// loaded machine"): each test below shows one, fails on today's code, and is
// skipped unless WEIR_KNOWN_DEFECTS=1. Fixes for them were tried and reverted
// (they broke make sim seeds); each test is what such a fix must make pass.
func knownDefect(t *testing.T) {
	t.Helper()
	if os.Getenv("WEIR_KNOWN_DEFECTS") == "" {
		t.Skip("known limit, not fixed (docs/design.md): WEIR_KNOWN_DEFECTS=1 runs it")
	}
}

// wirePeers is the wire's timing: the holder's deadline is the asker's
// plus the ask's transit (gRPC sends what is left of it), and a reply
// that comes after the asker's deadline is dropped.
type wirePeers struct {
	*directPeers
	transit time.Duration
}

func (w wirePeers) Handoff(ctx context.Context, addr string, req HandoffRequest) (HandoffReply, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		return w.directPeers.Handoff(ctx, addr, req)
	}
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl.Add(w.transit))
	defer cancel()
	r, err := w.directPeers.Handoff(sctx, addr, req)
	if ctx.Err() != nil {
		return HandoffReply{}, ctx.Err()
	}
	return r, err
}

// exportPastAsker is memCounters whose first Export returns after the
// asker's deadline but before the holder's own (half the transit before
// it): a holder that answers on a loaded machine, or after waiting out
// its own pull, a moment before its deadline.
type exportPastAsker struct {
	*memCounters
	transit time.Duration
	once    sync.Once
}

func (c *exportPastAsker) Export(ctx context.Context, parts []uint32) ([]State, error) {
	c.once.Do(func() {
		if dl, ok := ctx.Deadline(); ok {
			time.Sleep(time.Until(dl.Add(-c.transit / 2)))
		}
	})
	return c.memCounters.Export(ctx, parts)
}

// Known limit (traced sequences 1 and 5): a holder whose reply reaches
// the asker after the asker's deadline (its own deadline is later by the
// ask's transit, or the reply is slow on the wire) has marked the
// partitions moved and dropped their counters; the asker settles from
// copies, here none, and the spent counters are lost
// (TestClusterBackToBackJoinsKeepCounters at load 10: n4 answered n3's
// ask 2 ms before n3 logged its timeout; apikey:j14 came back from a full
// bucket).
func TestKnownReplyPastTheAskersDeadline(t *testing.T) {
	knownDefect(t)
	ctx := context.Background()
	const transit = 100 * time.Millisecond
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca := &exportPastAsker{memCounters: newMemCounters(), transit: transit}
	cb := newMemCounters()
	a := startHandoff(t, "a", 2, ca, wirePeers{peers, transit})
	b := startHandoff(t, "b", 2, cb, wirePeers{peers, transit})
	peers.nodes["a"], peers.nodes["b"] = a, b
	live := map[string]string{"a": "a", "b": "b"}
	if err := a.ChangeRing(ctx, RingChanged{Place: placeAll(2, "a"), Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(2) {
		ca.parts[p] = []State{{ID: uint64(10 + p), Partition: p, A: 5, B: 7}}
	}
	both := RingChanged{Place: placeAll(2, "b"), Members: []string{"a", "b"}, Live: live}
	if err := a.ChangeRing(ctx, both); err != nil {
		t.Fatal(err)
	}
	both.Base = placeAll(2, "a")
	if err := b.ChangeRing(ctx, both); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(2) {
		waitState(t, b, p, PartReady)
		if got, held := cb.get(p), ca.get(p); len(got) != 1 || got[0].B != 7 {
			t.Errorf("p%d at the puller: %+v (at the holder: %+v), want the holder's counter (B 7)", p, got, held)
		}
	}
}

// Known limit (traced sequence 4): a pull never asks a holder its view
// has as not live (gossip suspected it under load); it settles from
// copies, here none, while the holder keeps the counters released until
// Grace, and nobody asks it again when the view has it back
// (TestClusterBackToBackJoinsKeepCounters: apikey:j30, a broadcast that
// skipped n1, the only holder). Closing it needs the asker to ask a ring
// member again once its view has it back, or the holder to offer what it
// keeps released.
func TestKnownPullSkipsAHolderNotLive(t *testing.T) {
	knownDefect(t)
	ctx := context.Background()
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca, cb := newMemCounters(), newMemCounters()
	a := startQuick(t, "a", 1, ca, peers, NewStore(), nil)
	b := startQuick(t, "b", 1, cb, peers, NewStore(), nil)
	peers.nodes["a"], peers.nodes["b"] = a, b
	if err := a.ChangeRing(ctx, RingChanged{Place: placeAll(1, "a"), Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	ca.parts[0] = []State{{ID: 10, Partition: 0, A: 5, B: 7}}
	live := map[string]string{"a": "a", "b": "b"}
	both := RingChanged{Place: placeAll(1, "b"), Members: []string{"a", "b"}, Live: live}
	if err := a.ChangeRing(ctx, both); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, 0, PartReleased)
	// b joins; its view has a suspected at the moment its ring gives it p0.
	if err := b.ChangeRing(ctx, RingChanged{Place: placeAll(1, "b"), Members: []string{"a", "b"}, Live: map[string]string{"b": "b"}, Base: placeAll(1, "a")}); err != nil {
		t.Fatal(err)
	}
	waitState(t, b, 0, PartReady)
	// The view has a back: nothing asks it again (a pull would have made
	// p0 pending by the time ChangeRing returns).
	if err := b.ChangeRing(ctx, both); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.Routes().State(0); st == PartPending {
		waitState(t, b, 0, PartReady)
	}
	if got := cb.get(0); len(got) != 1 || got[0].B != 7 {
		t.Errorf("p0 at its owner b: %+v (a still holds %+v), want a's counter (B 7)", got, ca.get(0))
	}
}

// slowExport is memCounters whose Export takes delay: a holder on a
// loaded machine.
type slowExport struct {
	*memCounters
	delay time.Duration
}

func (c *slowExport) Export(ctx context.Context, parts []uint32) ([]State, error) {
	time.Sleep(c.delay)
	return c.memCounters.Export(ctx, parts)
}

// Known limit (the holder waiting for its own pull; the simulator grants
// it as waitedOut, and known-slow-pull.txt showed it before its gossip
// model changed): a asks b for p0 while b is itself still pulling p0 from
// c, slowly. b's Serve waits for that pull, a's ask times out, and a
// settles from copies (none here) while b's pull lands and b holds the
// counter released, which nobody asks for again.
func TestKnownAskWaitsOutTheHoldersOwnPull(t *testing.T) {
	knownDefect(t)
	ctx := context.Background()
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca, cb := newMemCounters(), newMemCounters()
	cc := &slowExport{memCounters: newMemCounters(), delay: 1500 * time.Millisecond}
	a := startHandoff(t, "a", 1, ca, peers) // asks time out after 1 s
	cfg := DefaultHandoffConfig("b", 1)
	cfg.AskTimeout = 5 * time.Second
	b := runHandoff(t, cfg, cb, peers, NewStore())
	c := startHandoff(t, "c", 1, cc, peers)
	peers.nodes["a"], peers.nodes["b"], peers.nodes["c"] = a, b, c
	if err := c.ChangeRing(ctx, RingChanged{Place: placeAll(1, "c"), Members: []string{"c"}, Live: map[string]string{"c": "c"}}); err != nil {
		t.Fatal(err)
	}
	cc.parts[0] = []State{{ID: 10, Partition: 0, A: 5, B: 7}}
	all := map[string]string{"a": "a", "b": "b", "c": "c"}
	// b's ring takes p0 from c (the pull is slow), and its next ring,
	// while the pull is under way, gives p0 to a.
	if err := b.ChangeRing(ctx, RingChanged{Place: placeAll(1, "b"), Members: []string{"b", "c"}, Live: all, Base: placeAll(1, "c")}); err != nil {
		t.Fatal(err)
	}
	if err := b.ChangeRing(ctx, RingChanged{Place: placeAll(1, "a"), Members: []string{"a", "b", "c"}, Live: all}); err != nil {
		t.Fatal(err)
	}
	// a's ring gives it p0 from b, the owner by the ring before.
	if err := a.ChangeRing(ctx, RingChanged{Place: placeAll(1, "a"), Members: []string{"a", "b", "c"}, Live: all, Base: placeAll(1, "b")}); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, 0, PartReady)
	waitState(t, b, 0, PartReleased)
	if got := ca.get(0); len(got) != 1 || got[0].B != 7 {
		t.Errorf("p0 at its owner a: %+v (b holds %+v, released), want c's counter (B 7)", got, cb.get(0))
	}
}
