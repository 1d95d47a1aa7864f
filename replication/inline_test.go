package replication

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/sched/schedtest"
)

var simStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newInline returns an Inline hand-off on sim, closed when the test ends.
func newInline(t *testing.T, sim *schedtest.Sim, id string, n int, c Counters, peers Peers) *Handoff {
	t.Helper()
	cfg := DefaultHandoffConfig(id, n)
	cfg.Sched, cfg.Inline = sim, true
	h, err := NewHandoff(cfg, c, peers, NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// inlineJoin is TestJoinPullsFromHolder on Inline hand-offs: a holds four
// partitions, b joins and takes p1 and p3. It returns both once b's ring
// changed (what happened to the pull is up to sim's Go mode).
func inlineJoin(t *testing.T, sim *schedtest.Sim) (a, b *Handoff, ca, cb *memCounters) {
	t.Helper()
	ctx := context.Background()
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca, cb = newMemCounters(), newMemCounters()
	a, b = newInline(t, sim, "a", 4, ca, peers), newInline(t, sim, "b", 4, cb, peers)
	peers.nodes["a"], peers.nodes["b"] = a, b
	solo := placeAll(4, "a")
	if err := a.ChangeRing(ctx, RingChanged{Place: solo, Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(4) {
		ca.parts[p] = []State{{ID: uint64(100 + p), Partition: p, A: int64(p)}}
	}
	both, live := placeAll(4, "a", "b"), map[string]string{"a": "a", "b": "b"}
	if err := a.ChangeRing(ctx, RingChanged{Place: both, Members: []string{"a", "b"}, Live: live}); err != nil {
		t.Fatal(err)
	}
	if err := b.ChangeRing(ctx, RingChanged{Place: both, Members: []string{"a", "b"}, Live: live, Base: solo}); err != nil {
		t.Fatal(err)
	}
	return a, b, ca, cb
}

// movedToB asserts p1 and p3 moved from a to b, counters and all.
func movedToB(t *testing.T, a, b *Handoff, ca, cb *memCounters) {
	t.Helper()
	for _, p := range []uint32{1, 3} {
		if st, _ := b.Routes().State(p); st != PartReady {
			t.Errorf("b's p%d: %s, want ready", p, st)
		}
		if got := cb.get(p); len(got) != 1 || got[0].ID != uint64(100+p) {
			t.Errorf("b's counters of p%d: %v", p, got)
		}
		if got := ca.get(p); len(got) != 0 {
			t.Errorf("a still has p%d's counters: %v", p, got)
		}
		if st, peer := a.Routes().State(p); st != PartMoved || peer != "b" {
			t.Errorf("a's p%d: %s %q, want moved to b", p, st, peer)
		}
	}
}

// An Inline hand-off applies each event on the caller's goroutine and
// starts nothing of its own: no ticker, no Run, and the pull a ring
// change asks for is queued on the seam until the driver runs it.
func TestInlineHandoffIsSteppedByItsCaller(t *testing.T) {
	sim := schedtest.New(1, simStart)
	a, b, ca, cb := inlineJoin(t, sim)
	if _, ok := sim.Next(); ok {
		t.Error("an Inline hand-off made a timer or ticker")
	}
	if err := a.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Errorf("Run of an Inline hand-off = %v, want ErrRunning", err)
	}
	// The ring change is applied, its pull queued and not run.
	for _, p := range []uint32{1, 3} {
		if st, peer := b.Routes().State(p); st != PartPending || peer != "a" {
			t.Fatalf("b's p%d after its ring change: %s %q, want pending from a", p, st, peer)
		}
		if st, _ := a.Routes().State(p); st != PartReleased {
			t.Fatalf("a's p%d before the pull: %s, want released", p, st)
		}
	}
	if n := sim.Queued(); n != 1 {
		t.Fatalf("%d pieces of work queued, want b's one pull", n)
	}
	if n := sim.RunAll(); n != 1 {
		t.Fatalf("ran %d, want 1", n)
	}
	movedToB(t, a, b, ca, cb)
	if a.Stats().HandedOff != 2 {
		t.Errorf("a handed off %d partitions, want 2", a.Stats().HandedOff)
	}
}

// A seam that runs work at once runs the pull inside ChangeRing, after
// the ring change was applied: the pull's own events (Arrived) are
// applied then, not blocked behind the event that started it.
func TestInlineHandoffWithWorkRunAtOnce(t *testing.T) {
	sim := schedtest.New(1, simStart)
	sim.SetGo(schedtest.Inline)
	a, b, ca, cb := inlineJoin(t, sim)
	movedToB(t, a, b, ca, cb)
}

// Tick steps time when the caller says: a partition released to a puller
// that never came is let go (its counters dropped, on the caller's
// goroutine) once Grace has passed on the seam's clock, not before.
// Close refuses later events.
func TestInlineHandoffTicks(t *testing.T) {
	ctx := context.Background()
	sim := schedtest.New(1, simStart)
	c := newMemCounters()
	h := newInline(t, sim, "a", 2, c, &directPeers{})
	if err := h.ChangeRing(ctx, RingChanged{Place: placeAll(2, "a"), Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	c.parts[1] = []State{{ID: 7, Partition: 1, A: 3}}
	live := map[string]string{"a": "a", "d": "d"}
	if err := h.ChangeRing(ctx, RingChanged{Place: placeAll(2, "a", "d"), Members: []string{"a", "d"}, Live: live}); err != nil {
		t.Fatal(err)
	}
	grace := DefaultHandoffConfig("a", 2).Grace
	sim.Advance(grace)
	if err := h.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.Routes().State(1); st != PartReleased || len(c.get(1)) != 1 {
		t.Fatalf("p1 at the end of the grace: %s with %d counters, want released and kept", st, len(c.get(1)))
	}
	sim.Advance(time.Nanosecond)
	if err := h.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.Routes().State(1); st != PartNone || len(c.get(1)) != 0 {
		t.Fatalf("p1 past the grace: %s with %d counters, want let go", st, len(c.get(1)))
	}
	if n := sim.Queued(); n != 0 {
		t.Errorf("ticks queued %d pieces of work, want none", n)
	}
	h.Close()
	if err := h.Tick(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Tick after Close = %v, want ErrClosed", err)
	}
	if _, err := h.Serve(ctx, HandoffRequest{To: "d", Parts: []uint32{0}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve after Close = %v, want ErrClosed", err)
	}
}

// An Inline replicator ships only when Flush is called: one send per
// destination queued on the seam in id order, each recording its result
// when the driver runs it; a refused batch waits for a later Flush.
func TestInlineReplicatorFlushes(t *testing.T) {
	ctx := context.Background()
	sim := schedtest.New(1, simStart)
	cfg := testConfig()
	cfg.Sched, cfg.Inline = sim, true
	l := newLink()
	p := &places{m: map[uint32][]string{}}
	p.set(0, "b", "self")
	p.set(1, "a", "b")
	r := newTestReplicator(t, cfg, l, p)
	if err := r.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Errorf("Run of an Inline replicator = %v, want ErrRunning", err)
	}
	r.Enqueue([]State{st(0, 1, 1), st(1, 2, 2)})
	if _, ok := sim.Next(); ok {
		t.Error("an Inline replicator made a timer or ticker")
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n, got := sim.Queued(), r.Stats().Pending; n != 2 || got != 3 || len(l.received("a")) != 0 {
		t.Fatalf("after Flush: %d sends queued, %d pending, %d delivered; want 2, 3, none yet", n, got, len(l.received("a")))
	}
	sim.RunNext()
	if len(l.received("a")) != 1 || len(l.received("b")) != 0 {
		t.Fatalf("the first send queued did not go to a (the first id): a %v, b %v", l.received("a"), l.received("b"))
	}
	sim.RunAll()
	if s := r.Stats(); s.Pending != 0 || s.Sent != 3 {
		t.Fatalf("after the sends: %+v, want nothing pending and 3 sent", s)
	}

	l.setFail("b", true)
	r.Enqueue([]State{st(0, 1, 5)})
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sim.RunAll()
	if s := r.Stats(); s.Pending != 1 || s.Failed != 1 {
		t.Fatalf("after a refused send: %+v, want 1 pending and 1 failed", s)
	}
	l.setFail("b", false)
	sim.SetGo(schedtest.Inline) // the sends run within Flush
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Pending != 0 || s.Sent != 4 {
		t.Fatalf("after the retry: %+v, want nothing pending and 4 sent", s)
	}
	if got := l.latest("b")[1]; got.A != 5 {
		t.Errorf("b holds %+v for counter 1, want the state of A 5", got)
	}
}

// Flush is for an Inline replicator only: Run owns the others' queues.
func TestFlushNeedsInline(t *testing.T) {
	r := newTestReplicator(t, testConfig(), newLink(), &places{m: map[uint32][]string{}})
	if err := r.Flush(context.Background()); !errors.Is(err, ErrRunning) {
		t.Fatalf("Flush without Inline = %v, want ErrRunning", err)
	}
}

// A change queued before a ring change goes to the replicas of the ring
// it was decided on (Seal), and a later change of the same counter to
// those of the ring the flush reads. Without Seal both went to the new
// ring's replicas, and a take-back from the old ones, when the new owner
// died before it installed the hand-off, missed the first (the
// simulator's recut-delay sequence, sim/testdata/fixed-recut-change.txt).
func TestSealShipsToTheRingDecidedOn(t *testing.T) {
	ctx := context.Background()
	sim := schedtest.New(1, simStart)
	sim.SetGo(schedtest.Inline)
	cfg := testConfig()
	cfg.Sched, cfg.Inline = sim, true
	l := newLink()
	p := &places{m: map[uint32][]string{}}
	p.set(0, "self", "b") // the old ring: b is p0's replica
	r := newTestReplicator(t, cfg, l, p)
	r.Enqueue([]State{st(0, 1, 1)})
	old := map[uint32][]string{0: {"self", "b"}}
	r.Seal(func(part uint32) []string { return old[part] })
	p.set(0, "c", "self") // the new ring: c owns p0, self is its replica
	r.Enqueue([]State{st(0, 1, 2)})
	if s := r.Stats(); s.Pending != 2 {
		t.Errorf("before the flush: %d pending, want 2 (the counter's change in the sealed inbox and the later one)", s.Pending)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := l.latest("b"); got[1].A != 1 {
		t.Errorf("b, the old ring's replica, holds %+v for counter 1, want the change decided on that ring (A 1)", got[1])
	}
	if got := l.latest("c"); len(got) != 1 || got[1].A != 2 {
		t.Errorf("c, the new ring's owner, holds %+v, want only the later change (A 2)", got)
	}
	if s := r.Stats(); s.Pending != 0 || s.Sent != 2 {
		t.Errorf("after the flush: %+v, want nothing pending and 2 sent", s)
	}
}
