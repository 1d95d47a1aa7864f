package replication

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
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

// TestSendsInAFixedOrder drives a Replicator on the deterministic seam:
// its ticker fires only when the test advances the clock, and its sends
// are queued for the test to run. A flush's sends go in the order of the
// destinations' ids, each batch in the order of its counters' first change
// (a change to a waiting counter keeps its place), whatever the maps hold.
func TestSendsInAFixedOrder(t *testing.T) {
	sim := schedtest.New(1, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := testConfig()
	cfg.Sched = sim
	c := &calls{}
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
	testwait.Until(t, "Run's ticker", func() bool { _, ok := sim.Next(); return ok })
	var want []State
	for i := range 24 {
		id := uint64(1000 - 7*i)
		want = append(want, st(uint32(i*5%8), id, int64(i)))
	}
	r.Enqueue(want[:12])
	r.Enqueue([]State{st(want[3].Partition, want[3].ID, 99)}) // replaces in place
	r.Enqueue(want[12:])

	sim.Advance(cfg.Interval)
	testwait.Until(t, "the flush's sends to be queued", func() bool { return sim.Queued() == 7 })
	if n := sim.RunAll(); n != 7 {
		t.Fatalf("ran %d sends, want 7 (every destination but self)", n)
	}
	var expect []string
	sent := 0
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
	testwait.Until(t, "the sends' results", func() bool { return r.Stats().Sent == uint64(sent) })
	if n := len(r.Stats().LastSuccess); n != 7 {
		t.Fatalf("%d destinations with a success, want 7", n)
	}
	// A destination idle for forgetAfter is forgotten at a flush.
	sim.Advance(forgetAfter)
	testwait.Until(t, "idle destinations forgotten", func() bool {
		sim.Advance(cfg.Interval)
		return len(r.Stats().LastSuccess) == 0
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
