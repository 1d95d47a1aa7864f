package replication

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// resyncs records the partitions of every state a Resync exported.
type resyncs struct {
	mu    sync.Mutex
	parts []uint32
}

func (r *resyncs) Resync(ctx context.Context, export func(context.Context) ([]State, error)) (int, error) {
	states, err := export(ctx)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range states {
		r.parts = append(r.parts, st.Partition)
	}
	return len(states), nil
}

func (r *resyncs) got() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(slices.Values(r.parts))
}

// Counters a pull with Keep keeps (back from a split, no live node holds
// the partition) are provisional: asked for within Settle they pass as
// replica copies, not as a holder's. The base lists only the members this
// node sees again, and one that served the partition all along may come
// back a ring later, whose counters must win. They are also resynced to
// the replicas, which may hold no copy: nothing was installed, so nothing
// was shipped (sim/testdata/fixed-regained-alone.txt).
func TestKeptCountersAreProvisionalAndResynced(t *testing.T) {
	ctx := context.Background()
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca, cb := newMemCounters(), newMemCounters()
	a := startHandoff(t, "a", 4, ca, peers)
	cfg := DefaultHandoffConfig("b", 4)
	cfg.AskTimeout = time.Second
	rs := &resyncs{}
	b, err := NewHandoff(cfg, cb, peers, NewStore(), rs)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	peers.nodes["a"], peers.nodes["b"] = a, b
	// b alone owns everything and decides on its own counters (a split).
	if err := b.ChangeRing(ctx, RingChanged{Place: placeAll(4, "b"), Members: []string{"b"}, Live: map[string]string{"b": "b"}}); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(4) {
		cb.parts[p] = []State{{ID: uint64(100 + p), Partition: p, A: int64(p)}}
	}
	// a holds none of them: c served them (c is not back in b's view).
	if err := a.ChangeRing(ctx, RingChanged{Place: placeAll(4, "c"), Members: []string{"a", "c"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	// Back with the base [a]: b owns p1 and p3 by its ring, and a, asked,
	// holds nothing of them.
	both := []Assignment{{Owner: "a", Replicas: []string{"a", "b"}}, {Owner: "b", Replicas: []string{"b", "a"}}, {Owner: "a", Replicas: []string{"a", "b"}}, {Owner: "b", Replicas: []string{"b", "a"}}}
	if err := b.ChangeRing(ctx, RingChanged{Place: both, Members: []string{"a", "b"}, Live: map[string]string{"a": "a", "b": "b"}, Base: placeAll(4, "a")}); err != nil {
		t.Fatal(err)
	}
	waitState(t, b, 1, PartReady)
	waitState(t, b, 3, PartReady)
	for _, p := range []uint32{1, 3} {
		if got := cb.get(p); len(got) != 1 || got[0].ID != uint64(100+p) {
			t.Errorf("b's counters of p%d: %v, want its own", p, got)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(rs.got(), []uint32{1, 3}) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := rs.got(); !slices.Equal(got, []uint32{1, 3}) {
		t.Errorf("resynced the counters of %v, want p1 and p3", got)
	}
	reply, err := b.Serve(ctx, HandoffRequest{To: "c", Parts: []uint32{1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.States) != 0 || len(reply.Copies) != 1 || reply.Copies[0].ID != 101 {
		t.Errorf("p1 asked for within Settle: states %v copies %v, want its counters as a copy", reply.States, reply.Copies)
	}
}

// A pull with Keep (this node gave way: back from a split, or a Raft
// leader again after a long time) replaces its counters only with what a
// holder handed over, and takes the copies it got for the keys it has no
// counter of. A holder that gave way too passes its counters as copies
// and drops them: before, a key whose only counter that was came back
// from a full bucket (TestClusterBackToBackJoinsKeepCounters at load 10:
// n1 passed apikey:j7's counter to n2, which had given way too). The
// puller's own counters still win over the copies.
func TestKeepPullFillsInKeysItLacks(t *testing.T) {
	ctx := context.Background()
	peers := &directPeers{nodes: map[string]*Handoff{}}
	ca, cb := newMemCounters(), newMemCounters()
	a := startHandoff(t, "a", 2, ca, peers)
	b := startHandoff(t, "b", 2, cb, peers)
	peers.nodes["a"], peers.nodes["b"] = a, b
	live := map[string]string{"a": "a", "b": "b"}
	if err := a.ChangeRing(ctx, RingChanged{Place: placeAll(2, "a"), Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.ChangeRing(ctx, RingChanged{Place: placeAll(2, "b"), Members: []string{"b"}, Live: map[string]string{"b": "b"}}); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(2) {
		ca.parts[p] = []State{{ID: uint64(10 + p), Partition: p, A: 5, B: 7}, {ID: uint64(20 + p), Partition: p, A: 5, B: 7}}
	}
	cb.parts[1] = []State{{ID: 21, Partition: 1, A: 6, B: 9}} // b decided this key on its side
	// Both give way (each lost its Raft leader): a keeps its counters
	// released as provisional ones, b pulls with Keep.
	both := RingChanged{Place: placeAll(2, "b"), Members: []string{"a", "b"}, Live: live, Base: placeAll(2, "b")}
	if err := a.ChangeRing(ctx, both); err != nil {
		t.Fatal(err)
	}
	both.Base = placeAll(2, "a")
	if err := b.ChangeRing(ctx, both); err != nil {
		t.Fatal(err)
	}
	for p := range uint32(2) {
		waitState(t, b, p, PartReady)
	}
	want := map[uint64]int64{10: 7, 11: 7, 20: 7, 21: 9} // b's own counter of 21 wins over a's copy
	for p := range uint32(2) {
		got := cb.get(p)
		if len(got) != 2 {
			t.Errorf("p%d at the puller: %+v, want 2 counters", p, got)
		}
		for _, st := range got {
			if want[st.ID] != st.B {
				t.Errorf("p%d counter %d: B %d, want %d", p, st.ID, st.B, want[st.ID])
			}
		}
	}
}
