package replication

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/sched/schedtest"
	"github.com/weirlimit/weir/internal/testwait"
)

// calls records Replicate calls in the order they were made.
type calls struct {
	mu  sync.Mutex
	got []string
}

func (c *calls) Replicate(_ context.Context, to, _ string, states []State) error {
	ids := make([]string, len(states))
	for i, s := range states {
		ids[i] = fmt.Sprint(s.ID)
	}
	c.mu.Lock()
	c.got = append(c.got, to+":"+strings.Join(ids, ","))
	c.mu.Unlock()
	return nil
}

// streamCalls records, in order, the batches a Replicator writes to its
// streams (on Run's goroutine) and acknowledges each batch that asks.
type streamCalls struct {
	calls
	opens, asks atomic.Int32
}

var _ Streams = (*streamCalls)(nil)

func (c *streamCalls) OpenStream(ctx context.Context, to string) (Stream, error) {
	c.opens.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	return &recStream{c: c, to: to, ctx: ctx, cancel: cancel, acks: make(chan uint64, maxUnacked)}, nil
}

type recStream struct {
	c      *streamCalls
	to     string
	ctx    context.Context
	cancel context.CancelFunc
	acks   chan uint64
}

func (s *recStream) Send(b Batch) error {
	if len(b.States) > 0 {
		_ = s.c.Replicate(s.ctx, s.to, b.From, b.States)
	}
	if b.Ack {
		s.c.asks.Add(1)
		s.acks <- b.Seq
	}
	return nil
}

func (s *recStream) Recv() (uint64, error) {
	select {
	case seq := <-s.acks:
		return seq, nil
	case <-s.ctx.Done():
		return 0, s.ctx.Err()
	}
}

func (s *recStream) Close() { s.cancel() }

// TestSendsInAFixedOrder drives a Replicator on the deterministic clock:
// its ticker fires only when the test advances it. Once the streams are
// open, a flush writes to them in the order of the destinations' ids, each
// batch in the order of its counters' first change (a change to a waiting
// counter keeps its place), whatever the maps hold. (The first batch to a
// destination goes out when its stream has opened.)
func TestSendsInAFixedOrder(t *testing.T) {
	sim := schedtest.New(1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sim.SetGo(schedtest.Spawn)
	cfg := testConfig()
	cfg.Sched = sim
	c := &streamCalls{}
	p := &places{m: map[uint32][]string{}}
	dests := []string{"g", "c", "self", "a", "f", "b", "e", "d"}
	for part := range uint32(8) {
		p.set(part, dests[part], dests[(part+3)%8])
	}
	r, err := NewReplicator(cfg, c, p.fn)
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	// Open a stream to every destination.
	var first []State
	for part := range uint32(8) {
		first = append(first, st(part, uint64(5000+part), 1))
	}
	r.Enqueue(first)
	testwait.Until(t, "Run's ticker", func() bool { _, ok := sim.Next(); return ok })
	sim.Advance(cfg.Interval)
	testwait.Until(t, "the first batches", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.got) == 7 })
	c.mu.Lock()
	c.got = nil
	c.mu.Unlock()

	var want []State
	for i := range 24 {
		id := uint64(1000 - 7*i)
		want = append(want, st(uint32(i*5%8), id, int64(i)))
	}
	r.Enqueue(want[:12])
	r.Enqueue([]State{st(want[3].Partition, want[3].ID, 99)}) // replaces in place
	r.Enqueue(want[12:])
	testwait.Until(t, "Run's ticker", func() bool { _, ok := sim.Next(); return ok })
	sim.Advance(cfg.Interval)
	testwait.Until(t, "the flush's batches", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.got) == 7 })
	var expect []string
	sent := 14 // the first batches' states
	for _, to := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		var ids []string
		for _, s := range want {
			if slices.Contains(p.fn(s.Partition), to) {
				ids = append(ids, fmt.Sprint(s.ID))
				sent++
			}
		}
		expect = append(expect, to+":"+strings.Join(ids, ","))
	}
	c.mu.Lock()
	got := slices.Clone(c.got)
	c.mu.Unlock()
	if !slices.Equal(got, expect) {
		t.Errorf("sends\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(expect, "\n"))
	}
	if n := c.opens.Load(); n != 7 {
		t.Errorf("%d streams opened, want 7 (one per destination)", n)
	}
	// Acknowledgements are asked for at most every AckInterval: the clock
	// brings the next ask.
	testwait.Until(t, "the batches acknowledged", func() bool {
		if r.Stats().Sent == uint64(sent) {
			return true
		}
		if _, ok := sim.Next(); ok {
			sim.Advance(cfg.Interval)
		}
		return false
	})
	if n := len(r.Stats().LastSuccess); n != 7 {
		t.Fatalf("%d destinations with a success, want 7", n)
	}
	// Nothing left to ship: the ticker stops.
	testwait.Until(t, "the ticker stopped", func() bool {
		if _, ok := sim.Next(); !ok {
			return true
		}
		sim.Advance(cfg.Interval)
		return false
	})
	// A destination idle for forgetAfter is forgotten at a flush.
	sim.Advance(forgetAfter)
	r.Enqueue([]State{st(0, 1, 1)})
	testwait.Until(t, "idle destinations forgotten", func() bool {
		sim.Advance(cfg.Interval)
		return len(r.Stats().LastSuccess) <= 2
	})
}

// asks records hand-off asks in order and answers none of them.
type asks struct {
	mu  sync.Mutex
	got []string
}

func (a *asks) Handoff(_ context.Context, addr string, req HandoffRequest) (HandoffReply, error) {
	a.mu.Lock()
	a.got = append(a.got, fmt.Sprint(addr, req.Parts))
	a.mu.Unlock()
	return HandoffReply{}, fmt.Errorf("%s is unreachable", addr)
}

// TestAsksInAFixedOrder runs a node's pull on the deterministic seam:
// the pull is queued work the test runs. A node gaining partitions from
// four previous owners, none of which answers, asks them in the order of
// their ids, and after each, asks every other live member, also in id
// order: the same asks every run, whatever the maps hold.
func TestAsksInAFixedOrder(t *testing.T) {
	sim := schedtest.New(1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := DefaultHandoffConfig("n", 8)
	cfg.Sched = sim
	peers := &asks{}
	h := runHandoff(t, cfg, newMemCounters(), peers, NewStore())
	live := map[string]string{}
	for _, id := range []string{"n", "f", "e", "d", "c", "b", "a"} {
		live[id] = id
	}
	base := placeAll(8, "e", "c", "a", "d")
	if err := h.ChangeRing(context.Background(), RingChanged{
		Place: placeAll(8, "n"), Members: []string{"n"}, Live: live, Base: base,
	}); err != nil {
		t.Fatal(err)
	}
	if n := sim.RunAll(); n != 1 {
		t.Fatalf("ran %d queued pulls, want 1", n)
	}
	var want []string
	for _, src := range []string{"a", "c", "d", "e"} {
		var parts []uint32
		for p, a := range base {
			if a.Owner == src {
				parts = append(parts, uint32(p))
			}
		}
		want = append(want, fmt.Sprint(src, parts))
		for _, other := range []string{"a", "b", "c", "d", "e", "f"} {
			if other != src {
				want = append(want, fmt.Sprint(other, parts))
			}
		}
	}
	peers.mu.Lock()
	got := slices.Clone(peers.got)
	peers.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("asks\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for p := range uint32(8) {
		waitState(t, h, p, PartReady) // nobody answered: fresh counters
	}
}

// hangingPeers answers an ask only when its context ends.
type hangingPeers struct{ asked chan string }

func (p hangingPeers) Handoff(ctx context.Context, addr string, _ HandoffRequest) (HandoffReply, error) {
	p.asked <- addr
	<-ctx.Done()
	return HandoffReply{}, ctx.Err()
}

// An ask's deadline runs on the seam's clock: with an hour to answer, a
// holder that hangs is given up on once the simulated hour has passed,
// not on the wall clock.
func TestAskDeadlineOnTheSeamsClock(t *testing.T) {
	sim := schedtest.New(1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sim.SetGo(schedtest.Spawn)
	cfg := DefaultHandoffConfig("n", 2)
	cfg.Sched, cfg.AskTimeout = sim, time.Hour
	peers := hangingPeers{asked: make(chan string, 1)}
	h := runHandoff(t, cfg, newMemCounters(), peers, NewStore())
	live := map[string]string{"n": "n", "a": "a"}
	if err := h.ChangeRing(context.Background(), RingChanged{
		Place: placeAll(2, "n"), Members: []string{"n"}, Live: live, Base: placeAll(2, "a"),
	}); err != nil {
		t.Fatal(err)
	}
	if got := <-peers.asked; got != "a" {
		t.Fatalf("asked %q, want the previous owner a", got)
	}
	sim.Advance(time.Hour - time.Nanosecond)
	if st, _ := h.Routes().State(0); st != PartPending {
		t.Fatalf("p0 %s before the ask's deadline, want pending", st)
	}
	sim.Advance(time.Nanosecond)
	waitState(t, h, 0, PartReady) // nobody else to ask: fresh counters
	waitState(t, h, 1, PartReady)
}

// The quiet replicator: with nothing to ship no timer is armed; the first
// change after a quiet spell is shipped Interval after it was queued (the
// loss bound, as with a ticker that never stops); and under a steady
// stream of changes the destination is asked to acknowledge at most once
// per AckInterval (plus the last batch), not once per batch.
func TestQuietBetweenChangesAndFewAcks(t *testing.T) {
	sim := schedtest.New(1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sim.SetGo(schedtest.Spawn)
	cfg := testConfig()
	cfg.Sched = sim
	cfg.Interval, cfg.AckInterval = 5*time.Millisecond, 25*time.Millisecond
	c := &streamCalls{}
	p := &places{m: map[uint32][]string{0: {"a"}}}
	r, err := NewReplicator(cfg, c, p.fn)
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	sent := func() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.got) }
	settle := func() { // advance until everything is acknowledged and the ticker stopped
		t.Helper()
		testwait.Until(t, "quiet", func() bool {
			if _, ok := sim.Next(); ok {
				sim.Advance(cfg.Interval)
				return false
			}
			return r.Stats().Pending == 0
		})
	}
	for round := range 3 {
		settle()
		sim.Advance(time.Hour) // quiet: no timer fires
		queued := sim.Now()
		before := sent()
		r.Enqueue([]State{st(0, uint64(round+1), 1)})
		testwait.Until(t, "the timer armed by the change", func() bool { _, ok := sim.Next(); return ok })
		if next, _ := sim.Next(); !next.Equal(queued.Add(cfg.Interval)) {
			t.Fatalf("round %d: first flush at %v after the change, want Interval (%v)", round, next.Sub(queued), cfg.Interval)
		}
		sim.Advance(cfg.Interval - time.Nanosecond)
		if sent() != before {
			t.Fatalf("round %d: shipped before Interval", round)
		}
		sim.Advance(time.Nanosecond)
		testwait.Until(t, "the change shipped at Interval", func() bool { return sent() == before+1 })
	}
	settle()

	// 100 ticks with a change each.
	asks0 := c.asks.Load()
	for i := range 100 {
		before, queued := sent(), sim.Now()
		r.Enqueue([]State{st(0, 100, int64(i))})
		// The change wakes Run, which ships it Interval later (the timer
		// may wait for an acknowledgement until Run takes the change).
		testwait.Until(t, "the timer of the change", func() bool {
			next, ok := sim.Next()
			return ok && !next.After(queued.Add(cfg.Interval))
		})
		sim.Advance(cfg.Interval)
		testwait.Until(t, "the batch", func() bool { return sent() == before+1 })
	}
	settle()
	asks := c.asks.Load() - asks0
	if most := int32(100*cfg.Interval/cfg.AckInterval) + 2; asks > most {
		t.Errorf("%d acknowledgements asked for 100 batches over %v, want at most %d", asks, 100*cfg.Interval, most)
	}
	if s := r.Stats(); s.Sent != 103 || s.Failed != 0 {
		t.Errorf("stats %+v, want 103 states acknowledged", s)
	}
}

// keptStreams is streamCalls that keeps the last stream it opened, so a
// test can break it.
type keptStreams struct {
	streamCalls
	lastMu sync.Mutex
	last   *recStream
}

func (k *keptStreams) OpenStream(ctx context.Context, to string) (Stream, error) {
	s, err := k.streamCalls.OpenStream(ctx, to)
	k.lastMu.Lock()
	k.last = s.(*recStream)
	k.lastMu.Unlock()
	return s, err
}

// A stream that fails while Run waits only for its acknowledgement (its
// timer set for AckInterval) puts the unacknowledged states back in the
// queue, and they leave again within Interval on a new stream, not at the
// acknowledgement's tick.
func TestFailedStreamRetriedWithinInterval(t *testing.T) {
	sim := schedtest.New(1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sim.SetGo(schedtest.Spawn)
	cfg := testConfig()
	cfg.Sched = sim
	cfg.Interval, cfg.AckInterval = 5*time.Millisecond, time.Hour
	k := &keptStreams{}
	p := &places{m: map[uint32][]string{0: {"a"}}}
	r, err := NewReplicator(cfg, k, p.fn)
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	sent := func() int { k.mu.Lock(); defer k.mu.Unlock(); return len(k.got) }
	ship := func(id uint64, want int) {
		t.Helper()
		queued := sim.Now()
		r.Enqueue([]State{st(0, id, 1)})
		testwait.Until(t, "the change's timer", func() bool {
			next, ok := sim.Next()
			return ok && !next.After(queued.Add(cfg.Interval))
		})
		sim.Advance(cfg.Interval)
		testwait.Until(t, "the batch", func() bool { return sent() == want })
	}
	ship(1, 1) // the stream's first batch asks, and is acknowledged
	testwait.Until(t, "the first acknowledgement", func() bool { return r.Stats().Sent == 1 })
	ship(2, 2) // not asking: the last ask is younger than AckInterval
	testwait.Until(t, "Run waiting for the acknowledgement", func() bool {
		next, ok := sim.Next()
		return ok && next.After(sim.Now().Add(time.Minute))
	})
	k.lastMu.Lock()
	k.last.cancel()
	k.lastMu.Unlock()
	testwait.Until(t, "the retry's timer", func() bool {
		next, ok := sim.Next()
		return ok && !next.After(sim.Now().Add(cfg.Interval))
	})
	sim.Advance(cfg.Interval)
	testwait.Until(t, "the state sent again", func() bool { return sent() == 3 })
	if n := k.opens.Load(); n != 2 {
		t.Errorf("%d streams opened, want 2", n)
	}
	k.mu.Lock()
	got := slices.Clone(k.got)
	k.mu.Unlock()
	if want := []string{"a:1", "a:2", "a:2"}; !slices.Equal(got, want) {
		t.Errorf("sends %v, want %v", got, want)
	}
	testwait.Until(t, "the retry acknowledged", func() bool { s := r.Stats(); return s.Sent == 2 && s.Failed == 1 })
}
