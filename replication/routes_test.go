package replication

import (
	"context"
	"testing"

	"github.com/weirlimit/weir/internal/sched/schedtest"
)

// Routes are published in copy-on-write chunks: a change to the
// partitions of one chunk leaves the other chunks shared with the last
// Routes, and Pending, Ready and State read the same as a full rebuild
// (over more partitions than one chunk, the last chunk partial).
func TestRoutesShareUnchangedChunks(t *testing.T) {
	const n = 3*routeChunkLen + 8
	ctx := context.Background()
	sim := schedtest.New(1, simStart)
	peers := &directPeers{nodes: map[string]*Handoff{}}
	a, b := newInline(t, sim, "a", n, newMemCounters(), peers), newInline(t, sim, "b", n, newMemCounters(), peers)
	peers.nodes["a"], peers.nodes["b"] = a, b
	solo, live := placeAll(n, "a"), map[string]string{"a": "a", "b": "b"}
	if err := a.ChangeRing(ctx, RingChanged{Place: solo, Members: []string{"a"}, Live: map[string]string{"a": "a"}}); err != nil {
		t.Fatal(err)
	}
	// b gains two partitions of the second chunk and one of the last.
	gained := []uint32{routeChunkLen + 1, routeChunkLen + 5, 3*routeChunkLen + 7}
	next := placeAll(n, "a")
	for _, p := range gained {
		next[p] = Assignment{Owner: "b", Replicas: []string{"b"}}
	}
	before := a.Routes()
	if err := a.ChangeRing(ctx, RingChanged{Place: next, Members: []string{"a", "b"}, Live: live}); err != nil {
		t.Fatal(err)
	}
	after := a.Routes()
	if len(after.chunks) != 4 {
		t.Fatalf("%d chunks for %d partitions, want 4", len(after.chunks), n)
	}
	for i, shared := range []bool{true, false, true, false} {
		if (after.chunks[i] == before.chunks[i]) != shared {
			t.Errorf("chunk %d shared = %t, want %t", i, !shared, shared)
		}
	}
	if err := b.ChangeRing(ctx, RingChanged{Place: next, Members: []string{"a", "b"}, Live: live, Base: solo}); err != nil {
		t.Fatal(err)
	}
	r := b.Routes()
	if r.Pending() != len(gained) {
		t.Errorf("b pending %d, want %d", r.Pending(), len(gained))
	}
	for p := range uint32(n) {
		st, _ := r.State(p)
		pending := st == PartPending
		if want := p == gained[0] || p == gained[1] || p == gained[2]; pending != want || (r.Ready(p) != nil) != want {
			t.Errorf("b's p%d: %s, ready chan %t, want pending %t", p, st, r.Ready(p) != nil, want)
		}
	}
	ready := r.Ready(gained[2])
	sim.RunAll() // the pull
	select {
	case <-ready:
	default:
		t.Error("the ready channel of a pulled partition is still open")
	}
	if r := b.Routes(); r.Pending() != 0 {
		t.Errorf("b pending %d after the pull, want 0", r.Pending())
	}
	for _, p := range gained {
		if st, peer := a.Routes().State(p); st != PartMoved || peer != "b" {
			t.Errorf("a's p%d: %s %q, want moved to b", p, st, peer)
		}
	}
}
