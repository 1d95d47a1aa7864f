package sim_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/weirlimit/weir/ring"
	"github.com/weirlimit/weir/sim"
)

// A run is on production's ring unless told otherwise, and a case's
// `ring` line survives Format and ParseCase.
func TestSimRingShape(t *testing.T) {
	if got, want := sim.RingShape(sim.DefaultOptions(1, 3)), ring.DefaultConfig().Shape(); got != want {
		t.Errorf("default run on %q, want production's %q", got, want)
	}
	legacy, err := sim.ParseRing("64 20 consistent", 3)
	if err != nil {
		t.Fatal(err)
	}
	if legacy != sim.LegacyRing(3) {
		t.Errorf("64 20 consistent = %+v, want LegacyRing %+v", legacy, sim.LegacyRing(3))
	}
	c := sim.Case{Seed: 7, Nodes: 3, Expect: "pass", Ring: legacy, Faults: []sim.Fault{}}
	back, err := sim.ParseCase("x", strings.NewReader(c.Format()))
	if err != nil {
		t.Fatal(err)
	}
	if back.Ring != legacy || sim.RingShape(back.Options()) != legacy.Shape() {
		t.Errorf("ring line lost: %q parsed to %+v", c.Format(), back.Ring)
	}
	if f := (sim.Case{Seed: 7, Nodes: 3, Expect: "pass"}).Format(); strings.Contains(f, "ring") {
		t.Errorf("production's shape written as a ring line:\n%s", f)
	}
	for _, bad := range []string{"64 20", "x 20 balanced", "64 20 round", "0 20 balanced"} {
		if _, err := sim.ParseRing(bad, 3); err == nil {
			t.Errorf("ParseRing(%q) = nil error", bad)
		}
	}
}

// A take-back (Partitions.tick: this node's ring owns a partition it
// handed to a puller its ring names a member, for Settle) needs two rings
// that both hold the taker and the puller and name different owners. On
// production's ring with the simulator's ids that takes 11 members: up to
// 10, removing any member or adding the next moves no partition between
// two members that stay (no member reaches the load cap), so one of the
// two rings must have left the other node out while it answered (a view
// fault, a flap, a split or a pause, whose measured grant covers what a
// take-back settled from copies loses). So takeback-unreachable is
// searched on 12 nodes, with the recut-loss sequence (docs/design.md,
// "Simulator bounds").
func TestTakeBackNeedsElevenMembers(t *testing.T) {
	cfg := ring.DefaultConfig()
	build := func(ids []string) *ring.Ring {
		r, err := ring.New(ids, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// between counts the partitions whose owner differs in a and b, both
	// owners members of both (other is in one ring only).
	between := func(a, b *ring.Ring, other string) int {
		n := 0
		for p := range uint32(a.PartitionCount()) {
			oa, ob := a.PartitionOwner(p), b.PartitionOwner(p)
			if oa != ob && oa != other && ob != other {
				n++
			}
		}
		return n
	}
	for n := 2; n <= 12; n++ {
		var ids []string
		for i := 1; i <= n; i++ {
			ids = append(ids, fmt.Sprintf("n%d", i))
		}
		all, moved := build(ids), 0
		for i, gone := range ids {
			moved += between(all, build(slices.Delete(slices.Clone(ids), i, i+1)), gone)
		}
		next := fmt.Sprintf("n%d", n+1)
		moved += between(all, build(append(slices.Clone(ids), next)), next)
		switch {
		case n <= 10 && moved > 0:
			t.Errorf("%d members: %d partitions move between members that stay when one leaves or n%d joins, want none", n, moved, n+1)
		case n >= 11 && moved == 0:
			t.Errorf("%d members: no partition moves between members that stay; the recut-loss search on 12 nodes needs some", n)
		}
	}
}
