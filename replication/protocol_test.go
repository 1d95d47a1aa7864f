package replication

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memCounters stands in for the shard engine: counters by partition.
type memCounters struct {
	mu        sync.Mutex
	parts     map[uint32][]State
	exports   int
	exportErr error
}

func newMemCounters() *memCounters { return &memCounters{parts: map[uint32][]State{}} }

func (c *memCounters) Export(_ context.Context, parts []uint32) ([]State, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exports++
	if c.exportErr != nil {
		return nil, c.exportErr
	}
	var out []State
	for _, p := range parts {
		out = append(out, c.parts[p]...)
	}
	return out, nil
}

// Import keeps a counter it already has, as the shard engine does.
func (c *memCounters) Import(_ context.Context, states []State) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range states {
		if !slices.ContainsFunc(c.parts[s.Partition], func(x State) bool { return x.ID == s.ID }) {
			c.parts[s.Partition] = append(c.parts[s.Partition], s)
		}
	}
	return nil
}

func (c *memCounters) Drop(_ context.Context, parts []uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range parts {
		delete(c.parts, p)
	}
	return nil
}

func (c *memCounters) get(p uint32) []State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.parts[p])
}

// directPeers calls the other nodes' Serve in process, by address.
type directPeers struct {
	mu    sync.Mutex
	nodes map[string]*Handoff
}

func (d *directPeers) Handoff(ctx context.Context, addr string, req HandoffRequest) (HandoffReply, error) {
	d.mu.Lock()
	h := d.nodes[addr]
	d.mu.Unlock()
	if h == nil {
		return HandoffReply{}, errors.New("no such node")
	}
	return h.Serve(ctx, req)
}

func startHandoff(t *testing.T, id string, n int, c Counters, peers Peers) *Handoff {
	t.Helper()
	cfg := DefaultHandoffConfig(id, n)
	cfg.AskTimeout = time.Second
	return runHandoff(t, cfg, c, peers, NewStore())
}

// startQuick is startHandoff with a 50 ms Settle ticked every 10 ms, the
// given replica store and clock (nil: the wall clock).
func startQuick(t *testing.T, id string, n int, c Counters, peers Peers, store *Store, now func() int64) *Handoff {
	t.Helper()
	cfg := DefaultHandoffConfig(id, n)
	cfg.AskTimeout, cfg.Settle, cfg.TickEvery = time.Second, 50*time.Millisecond, 10*time.Millisecond
	cfg.Now = now
	return runHandoff(t, cfg, c, peers, store)
}

// runHandoff starts a Handoff's Run until the test ends.
func runHandoff(t *testing.T, cfg HandoffConfig, c Counters, peers Peers, store *Store) *Handoff {
	t.Helper()
	h, err := NewHandoff(cfg, c, peers, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func placeAll(n int, owners ...string) []Assignment {
	out := make([]Assignment, n)
	for p := range out {
		o := owners[p%len(owners)]
		out[p] = Assignment{Owner: o, Replicas: []string{o}}
	}
	return out
}

// waitState waits (by the routes' change notices, not by sleeping) until
// p is in state want.
func waitState(t *testing.T, h *Handoff, p uint32, want PartState) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		r := h.Routes()
		if st, _ := r.State(p); st == want {
			return
		}
		select {
		case <-r.Changed():
		case <-deadline:
			st, peer := h.Routes().State(p)
			t.Fatalf("partition %d: %s (peer %q), want %s", p, st, peer, want)
		}
	}
}

// A hand-off exports a partition only once the checks that pinned it are
// decided; after it, a pin fails and names the puller.
func TestPinHoldsOffHandoff(t *testing.T) {
	ctx := context.Background()
	c := newMemCounters()
	h := startHandoff(t, "a", 4, c, &directPeers{})
	if err := h.ChangeRing(ctx, RingChanged{Place: placeAll(4, "a"), Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := h.Pin(2); !ok {
		t.Fatal("pin of a ready partition failed")
	}
	served := make(chan error, 1)
	go func() {
		_, err := h.Serve(ctx, HandoffRequest{To: "n9", Parts: []uint32{2}})
		served <- err
	}()
	waitState(t, h, 2, PartMoved)
	select {
	case err := <-served:
		t.Fatalf("hand-off finished (%v) while a check still pinned the partition", err)
	case <-time.After(20 * time.Millisecond):
	}
	h.Unpin(2)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if ok, to := h.Pin(2); ok || to != "n9" {
		t.Fatalf("pin after the hand-off = %v, %q; want false, n9", ok, to)
	}
}

// Bad requests are refused and change nothing.
func TestServeRejectsBadRequests(t *testing.T) {
	ctx := context.Background()
	h := startHandoff(t, "a", 4, newMemCounters(), &directPeers{})
	if err := h.ChangeRing(ctx, RingChanged{Place: placeAll(4, "a"), Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	for _, req := range []HandoffRequest{
		{To: "", Parts: []uint32{1}},
		{To: "a", Parts: []uint32{1}},
		{To: "b", Parts: []uint32{1, 4}},
	} {
		if _, err := h.Serve(ctx, req); !errors.Is(err, ErrBadRequest) {
			t.Errorf("Serve(%+v) = %v, want ErrBadRequest", req, err)
		}
	}
	for p := range uint32(4) {
		if st, _ := h.Routes().State(p); st != PartReady {
			t.Errorf("partition %d is %s after bad requests", p, st)
		}
	}
}

// A hand-off whose export fails hands the partition back: still ready
// here, and its counters are still here.
func TestServeHandsBackOnFailure(t *testing.T) {
	ctx := context.Background()
	c := newMemCounters()
	c.parts[1] = []State{{ID: 7, Partition: 1, A: 3}}
	c.exportErr = errors.New("engine closed")
	h := startHandoff(t, "a", 2, c, &directPeers{})
	if err := h.ChangeRing(ctx, RingChanged{Place: placeAll(2, "a"), Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Serve(ctx, HandoffRequest{To: "b", Parts: []uint32{1}}); err == nil {
		t.Fatal("Serve succeeded with a failing export")
	}
	if st, _ := h.Routes().State(1); st != PartReady {
		t.Fatalf("after a failed hand-off: %s, want ready", st)
	}
	if got := c.get(1); len(got) != 1 {
		t.Fatalf("counters after a failed hand-off: %v", got)
	}
}

// b joins a: it pulls the partitions it takes over from a, which hands
// them over and forwards later items to b. Counters move exactly once.
func TestJoinPullsFromHolder(t *testing.T) {
	ctx := context.Background()
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca, cb := newMemCounters(), newMemCounters()
	a := startHandoff(t, "a", 4, ca, peers)
	b := startHandoff(t, "b", 4, cb, peers)
	peers.nodes["a"], peers.nodes["b"] = a, b
	live := map[string]string{"a": "a", "b": "b"}
	if err := a.ChangeRing(ctx, RingChanged{Place: placeAll(4, "a"), Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(4) {
		ca.parts[p] = []State{{ID: uint64(100 + p), Partition: p, A: int64(p)}}
	}
	both := placeAll(4, "a", "b") // b owns p1 and p3
	if err := a.ChangeRing(ctx, RingChanged{Place: both, Members: []string{"a", "b"}, Live: live}); err != nil {
		t.Fatal(err)
	}
	if err := b.ChangeRing(ctx, RingChanged{Place: both, Members: []string{"a", "b"}, Live: live, Base: placeAll(4, "a")}); err != nil {
		t.Fatal(err)
	}
	// Right after the ring change p1 is pending from a, unless the pull
	// already finished (it runs on its own goroutine).
	if st, peer := b.Routes().State(1); st != PartReady && (st != PartPending || peer != "a") {
		t.Fatalf("b's p1 right after the ring change: %s %q, want pending from a (or ready)", st, peer)
	}
	waitState(t, b, 1, PartReady)
	waitState(t, b, 3, PartReady)
	for _, p := range []uint32{1, 3} {
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
	if got := ca.get(0); len(got) != 1 {
		t.Errorf("a lost p0, which it keeps: %v", got)
	}
	if s := a.Stats(); s.HandedOff != 2 {
		t.Errorf("a handed off %d partitions, want 2", s.HandedOff)
	}
}

// A take-back whose holder does not answer (a link down while gossip still
// lists it) leaves the partition moved to the holder, which has its
// counters, rather than settling it here with none (the chaos suite's cut
// admitted a spent key that way); once the holder answers, the take-back
// brings the counters home.
func TestTakeBackWaitsForAnUnreachableHolder(t *testing.T) {
	ctx := context.Background()
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca, cb := newMemCounters(), newMemCounters()
	a := startQuick(t, "a", 2, ca, peers, NewStore(), nil)
	b := startQuick(t, "b", 2, cb, peers, NewStore(), nil)
	peers.nodes["a"], peers.nodes["b"] = a, b
	live := map[string]string{"a": "a", "b": "b"}
	place := []Assignment{{Owner: "a", Replicas: []string{"a", "b"}}, {Owner: "a", Replicas: []string{"a", "b"}}}
	if err := a.ChangeRing(ctx, RingChanged{Place: place, Members: []string{"a", "b"}, Live: live}); err != nil {
		t.Fatal(err)
	}
	spent := State{ID: 7, Partition: 1, A: 1, B: 3}
	ca.parts[1] = []State{spent}
	// b pulls p1 on a ring a never agreed with (b owns p1 by it): a marks
	// p1 moved to b, and b holds its counter.
	placeB := []Assignment{place[0], {Owner: "b", Replicas: []string{"b", "a"}}}
	if err := b.ChangeRing(ctx, RingChanged{Place: placeB, Members: []string{"a", "b"}, Live: live, Base: place}); err != nil {
		t.Fatal(err)
	}
	waitState(t, b, 1, PartReady)
	if got := cb.get(1); len(got) != 1 {
		t.Fatalf("b's p1 after its pull: %v", got)
	}
	peers.mu.Lock()
	delete(peers.nodes, "b") // and now b does not answer
	peers.mu.Unlock()
	// Settle passes, a tries to take p1 back, b does not answer: p1 goes
	// back to moved to b, and a holds no counter it would start from a
	// full bucket. Two unanswered take-backs: it also asks again.
	deadline := time.Now().Add(5 * time.Second)
	for a.Stats().Unreached < 2 {
		if st, peer := a.Routes().State(1); st == PartReady {
			t.Fatalf("a settled p1 (%s %q) while its holder b did not answer", st, peer)
		}
		if time.Now().After(deadline) {
			t.Fatalf("a made %d unanswered take-backs of p1 in 5 s, want 2", a.Stats().Unreached)
		}
		time.Sleep(5 * time.Millisecond) // poll
	}
	if st, peer := a.Routes().State(1); st == PartReady {
		t.Fatalf("a settled p1 (%s %q) while its holder b did not answer", st, peer)
	}
	if got := ca.get(1); len(got) != 0 {
		t.Fatalf("a installed %v for p1 without its holder", got)
	}
	// b answers again, on a's ring now: the next take-back brings the spent
	// counter home.
	peers.mu.Lock()
	peers.nodes["b"] = b
	peers.mu.Unlock()
	if err := b.ChangeRing(ctx, RingChanged{Place: place, Members: []string{"a", "b"}, Live: live}); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, 1, PartReady)
	if got := ca.get(1); len(got) != 1 || got[0].ID != spent.ID || got[0].B != spent.B {
		t.Fatalf("a's p1 after the take-back: %v, want the spent counter %v", got, spent)
	}
}

// A take-back whose holder does not answer leaves that holder's
// partitions out of the install, replica copies included: b pulled p0
// and p1 from a on a ring a never agreed with and handed p0 on to c; b
// then does not answer a's take-back, whose broadcast finds p0 held by c
// and a replica copy of p1 at c. p0 comes home; p1 goes back to moved to
// b, and a installs no counter of it (it imported the copy with p0's
// install, counters of a partition it did not hold: the simulator's
// sim/testdata/fixed-takeback-unreached-copies.txt).
func TestTakeBackLeavesUnreachedCopiesOut(t *testing.T) {
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca, cb, cc := newMemCounters(), newMemCounters(), newMemCounters()
	storeC := NewStore()
	a := startQuick(t, "a", 2, ca, peers, NewStore(), clock.Load)
	b := startQuick(t, "b", 2, cb, peers, NewStore(), nil)
	c := startQuick(t, "c", 2, cc, peers, storeC, nil)
	peers.nodes["a"], peers.nodes["b"], peers.nodes["c"] = a, b, c
	live := map[string]string{"a": "a", "b": "b", "c": "c"}
	members := []string{"a", "b", "c"}
	placeA := []Assignment{{Owner: "a", Replicas: []string{"a", "c"}}, {Owner: "a", Replicas: []string{"a", "c"}}}
	if err := a.ChangeRing(ctx, RingChanged{Place: placeA, Members: members, Live: live}); err != nil {
		t.Fatal(err)
	}
	ca.parts[0] = []State{{ID: 1, Partition: 0, A: 1, B: 2}}
	ca.parts[1] = []State{{ID: 2, Partition: 1, A: 1, B: 5}}
	placeB := []Assignment{{Owner: "b", Replicas: []string{"b", "a"}}, {Owner: "b", Replicas: []string{"b", "a"}}}
	if err := b.ChangeRing(ctx, RingChanged{Place: placeB, Members: members, Live: live, Base: placeA}); err != nil {
		t.Fatal(err)
	}
	waitState(t, b, 0, PartReady)
	waitState(t, b, 1, PartReady)
	placeC := []Assignment{{Owner: "c", Replicas: []string{"c", "b"}}, placeB[1]}
	if err := c.ChangeRing(ctx, RingChanged{Place: placeC, Members: members, Live: live, Base: placeB}); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, 0, PartReady)
	stale := State{ID: 2, Partition: 1, A: 1, B: 1}
	if err := storeC.Apply("b", []State{stale}); err != nil {
		t.Fatal(err)
	}
	peers.mu.Lock()
	delete(peers.nodes, "b") // and now b does not answer
	peers.mu.Unlock()
	clock.Add(int64(time.Second)) // Settle passes: a takes p0 and p1 back from b
	waitState(t, a, 0, PartReady)
	if got := ca.get(0); len(got) != 1 || got[0].ID != 1 {
		t.Fatalf("a's p0 after the take-back: %v, want c's counter", got)
	}
	for a.Stats().Unreached < 1 {
		time.Sleep(5 * time.Millisecond) // poll
	}
	if st, peer := a.Routes().State(1); st != PartMoved || peer != "b" {
		t.Fatalf("a's p1: %s %q, want moved to b", st, peer)
	}
	if got := ca.get(1); len(got) != 0 {
		t.Fatalf("a installed %v for p1, which it does not hold (moved to b)", got)
	}
}

// The repeated-cut defect of the chaos suite (issue 13): b's gossip view
// flaps to b alone for a moment, b promotes its replica copy of p0 (which
// c never stopped serving) and holds it, released, once its view is back.
// a comes back from a cut seeing only b and pulls p0 from b as the owner
// of the other side. b's leftover is only a copy: a keeps its own
// counters (coming back from a split, only a holder's counters replace
// them), where before it installed the leftover as a holder's counters.
// Once b has served promoted counters for the settle time they are its
// own, and a takes them (the larger side's counters win).
func TestFlapLeftoversPassOnlyAsCopies(t *testing.T) {
	for _, served := range []bool{false, true} {
		name := map[bool]string{false: "flap", true: "settled"}[served]
		t.Run(name, func(t *testing.T) {
			peers := &directPeers{nodes: map[string]*Handoff{}}
			ca, cb := newMemCounters(), newMemCounters()
			// A fake clock: the settle time passes when the test says so.
			var clock atomic.Int64
			clock.Store(1)
			now := clock.Load
			storeB := NewStore()
			a := startQuick(t, "a", 1, ca, peers, NewStore(), now)
			b := startQuick(t, "b", 1, cb, peers, storeB, now)
			peers.nodes["a"], peers.nodes["b"] = a, b
			ring := func(h *Handoff, place []Assignment, base []Assignment, ids ...string) {
				t.Helper()
				changeRing(t, h, RingChanged{Place: place, Base: base}, ids...)
			}
			r3 := []Assignment{{Owner: "a", Replicas: []string{"a", "c"}}}
			r2 := []Assignment{{Owner: "c", Replicas: []string{"c", "b"}}}
			solo := []Assignment{{Owner: "b", Replicas: []string{"b"}}}
			spent := State{ID: 7, Partition: 0, A: 1, B: 3}
			stale := State{ID: 7, Partition: 0, A: 1, B: 0}
			// a alone (it is cut off) holds p0 with the spent counter.
			ring(a, r3, nil, "a")
			waitState(t, a, 0, PartReady)
			ca.parts[0] = []State{spent}
			// b, with c: c owns p0 and ships b a copy (here, a stale one).
			ring(b, r2, nil, "b", "c")
			if err := storeB.Apply("c", []State{stale}); err != nil {
				t.Fatal(err)
			}
			// b's view flaps to b alone: it promotes its copy.
			ring(b, solo, nil, "b")
			waitState(t, b, 0, PartReady)
			if served {
				clock.Add(int64(time.Second)) // past Settle (50 ms)
			}
			ring(b, r2, nil, "b", "c")
			waitState(t, b, 0, PartReleased)
			// a comes back seeing only b: it pulls p0 from b (the owner in
			// the other side's ring as a sees it), keeping what b has not
			// handed over as a holder.
			ring(a, r3, solo, "a", "b")
			waitState(t, a, 0, PartReady)
			want := spent
			if served {
				want = stale
			}
			if got := ca.get(0); len(got) != 1 || got[0].B != want.B {
				t.Fatalf("a's p0 after pulling from b: %v, want %v", got, want)
			}
			if st, peer := b.Routes().State(0); st != PartMoved || peer != "a" {
				t.Fatalf("b's p0: %s %q, want moved to a", st, peer)
			}
			if got := cb.get(0); len(got) != 0 {
				t.Fatalf("b kept p0's counters after passing them: %v", got)
			}
		})
	}
}

// A partition gained back while this node still holds it released (its
// leftovers, nobody pulled them) and no live node holds it: the copies
// replace the leftovers key by key, and a key no copy carries keeps the
// leftover. Import keeps a counter it finds, so the leftovers used to win
// whole (sim/testdata/fixed-held-leftovers.txt).
func TestHeldLeftoversGiveWayToCopies(t *testing.T) {
	cb, store := newMemCounters(), NewStore()
	b := startQuick(t, "b", 1, cb, &directPeers{nodes: map[string]*Handoff{}}, store, func() int64 { return 1 })
	ring := func(place []Assignment, departed []string, ids ...string) {
		t.Helper()
		changeRing(t, b, RingChanged{Place: place, Departed: departed}, ids...)
	}
	ring([]Assignment{{Owner: "b", Replicas: []string{"b"}}}, nil, "b")
	waitState(t, b, 0, PartReady)
	stale, kept := State{ID: 7, Partition: 0, A: 1, B: 1}, State{ID: 8, Partition: 0, A: 1, B: 2}
	cb.parts[0] = []State{stale, kept}
	// c takes p0 over and never pulls it; its copies reach b.
	ring([]Assignment{{Owner: "c", Replicas: []string{"c", "b"}}}, nil, "b", "c")
	waitState(t, b, 0, PartReleased)
	fresh := State{ID: 7, Partition: 0, A: 1, B: 9}
	if err := store.Apply("c", []State{fresh}); err != nil {
		t.Fatal(err)
	}
	// c dies: b owns p0 again, from its copies over its leftovers.
	ring([]Assignment{{Owner: "b", Replicas: []string{"b"}}}, []string{"c"}, "b")
	waitState(t, b, 0, PartReady)
	got := map[uint64]State{}
	for _, st := range cb.get(0) {
		got[st.ID] = st
	}
	if got[7].B != fresh.B || got[8].B != kept.B || len(got) != 2 {
		t.Fatalf("counters %v, want the copy of 7 (%v) and the leftover of 8 (%v)", cb.get(0), fresh, kept)
	}
}

// changeRing gives h the ring e with ids as its members, all alive.
func changeRing(t *testing.T, h *Handoff, e RingChanged, ids ...string) {
	t.Helper()
	e.Members, e.Live = ids, map[string]string{}
	for _, id := range ids {
		e.Live[id] = id
	}
	if err := h.ChangeRing(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

// A released partition nobody pulled within the settle time passes only
// as copies. The chaos suite: a node was paused, the others served its
// partitions meanwhile and released them when it came back, and it never
// pulled them (its own ring never lost them). During a later cut it
// flapped alone, gave way, and pulled its partitions back from a node
// that still held those leftovers: handed over as a holder's counters,
// they replaced its own, and keys spent since came back with tokens.
func TestUnpulledLeftoversPassOnlyAsCopies(t *testing.T) {
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(1)
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca, cb := newMemCounters(), newMemCounters()
	a := startQuick(t, "a", 1, ca, peers, NewStore(), clock.Load)
	b := startQuick(t, "b", 1, cb, peers, NewStore(), clock.Load)
	peers.nodes["a"], peers.nodes["b"] = a, b
	live := map[string]string{"a": "a", "b": "b"}
	stale := State{ID: 7, Partition: 0, A: 1, B: 9}
	spent := State{ID: 7, Partition: 0, A: 1, B: 3}
	// a served p0 while b was away and released it when b came back.
	if err := a.ChangeRing(ctx, RingChanged{Place: placeAll(1, "a"), Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	ca.parts[0] = []State{stale}
	if err := a.ChangeRing(ctx, RingChanged{Place: placeAll(1, "b"), Members: []string{"a", "b"}, Live: live}); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, 0, PartReleased)
	// b never lost p0 and spent its key since.
	if err := b.ChangeRing(ctx, RingChanged{Place: placeAll(1, "b"), Members: []string{"b"}, Live: map[string]string{"b": "b"}}); err != nil {
		t.Fatal(err)
	}
	cb.parts[0] = []State{spent}
	clock.Add(int64(time.Second)) // past Settle (50 ms): nobody pulled a's leftovers
	// b gives way (its view flapped alone) and pulls p0 from a.
	if err := b.ChangeRing(ctx, RingChanged{Place: placeAll(1, "b"), Members: []string{"a", "b"}, Live: live, Base: placeAll(1, "a")}); err != nil {
		t.Fatal(err)
	}
	waitState(t, b, 0, PartReady)
	if got := cb.get(0); len(got) != 1 || got[0].B != spent.B {
		t.Errorf("b's p0 after pulling from a: %v, want its own spent counter %v", got, spent)
	}
}
