package clusterview

import (
	"fmt"
	"slices"
	"testing"

	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
)

func mustRing(t testing.TB, members []string, cfg ring.Config) *ring.Ring {
	t.Helper()
	r, err := ring.New(members, cfg)
	if err != nil {
		t.Fatalf("ring.New(%d members): %v", len(members), err)
	}
	return r
}

// nodeIDs is node-0 ... node-(n-1).
func nodeIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i)
	}
	return out
}

func TestDiffFromNothing(t *testing.T) {
	r := mustRing(t, []string{"a", "b", "c"}, ring.LegacyConfig())
	moves := Diff(nil, r)
	if len(moves) != 271 {
		t.Fatalf("Diff(nil, r) has %d moves, want all 271 partitions", len(moves))
	}
	for i, m := range moves {
		if m.Partition != uint32(i) || m.OldOwner != "" || m.OldReplicas != nil {
			t.Fatalf("move %d = %+v, want partition %d from nothing", i, m, i)
		}
		if m.NewOwner != r.PartitionOwner(m.Partition) || !slices.Equal(m.NewReplicas, r.PartitionReplicas(m.Partition)) {
			t.Fatalf("move %+v disagrees with the ring", m)
		}
		if !m.OwnerChanged() || !slices.Equal(m.Gained(), m.NewReplicas) || m.Lost() != nil {
			t.Fatalf("move %+v: Gained %v Lost %v", m, m.Gained(), m.Lost())
		}
	}
	if got := Diff(nil, mustRing(t, nil, ring.LegacyConfig())); got != nil {
		t.Errorf("Diff(nil, empty) = %v, want nothing", got)
	}
	if got := Diff(nil, nil); got != nil {
		t.Errorf("Diff(nil, nil) = %v", got)
	}
}

func TestDiffToNothing(t *testing.T) {
	r := mustRing(t, []string{"a", "b"}, ring.LegacyConfig())
	for _, to := range []*ring.Ring{nil, mustRing(t, nil, ring.LegacyConfig())} {
		moves := Diff(r, to)
		if len(moves) != 271 {
			t.Fatalf("Diff(r, empty) has %d moves, want 271", len(moves))
		}
		for _, m := range moves {
			if m.NewOwner != "" || m.NewReplicas != nil || !slices.Equal(m.Lost(), m.OldReplicas) {
				t.Fatalf("move %+v should lose everything", m)
			}
		}
	}
}

func TestDiffSameMembersIsEmpty(t *testing.T) {
	a := mustRing(t, []string{"x", "y", "z"}, ring.LegacyConfig())
	b := mustRing(t, []string{"z", "x", "y"}, ring.LegacyConfig())
	if d := Diff(a, b); d != nil {
		t.Fatalf("Diff of the same member set = %d moves", len(d))
	}
}

// TestDiffListsExactlyTheChanges walks every partition of a join and a
// leave: a partition is listed iff its owner or replica list differs, and
// the move carries both sides as the rings report them.
func TestDiffListsExactlyTheChanges(t *testing.T) {
	cfg := ring.LegacyConfig()
	cfg.Replicas = 3
	members := nodeIDs(6)
	steps := []struct{ from, to []string }{
		{members[:5], members}, // node-5 joins
		{members, append(slices.Clone(members[:2]), members[3:]...)}, // node-2 leaves
	}
	for _, st := range steps {
		old, new := mustRing(t, st.from, cfg), mustRing(t, st.to, cfg)
		moves := Diff(old, new)
		byPart := map[uint32]replication.Move{}
		for i, m := range moves {
			if i > 0 && moves[i-1].Partition >= m.Partition {
				t.Fatalf("moves not in ascending partition order at %d", i)
			}
			byPart[m.Partition] = m
		}
		ownerMoves := 0
		for p := range uint32(271) {
			oldR, newR := old.PartitionReplicas(p), new.PartitionReplicas(p)
			m, listed := byPart[p]
			if changed := !slices.Equal(oldR, newR); changed != listed {
				t.Fatalf("partition %d: replicas %v -> %v, listed=%v", p, oldR, newR, listed)
			}
			if !listed {
				continue
			}
			if m.OldOwner != oldR[0] || m.NewOwner != newR[0] || !slices.Equal(m.OldReplicas, oldR) || !slices.Equal(m.NewReplicas, newR) {
				t.Fatalf("move %+v, rings say %v -> %v", m, oldR, newR)
			}
			for _, id := range m.Gained() {
				if slices.Contains(oldR, id) || !slices.Contains(newR, id) {
					t.Fatalf("move %+v: Gained %v wrong", m, m.Gained())
				}
			}
			for _, id := range m.Lost() {
				if !slices.Contains(oldR, id) || slices.Contains(newR, id) {
					t.Fatalf("move %+v: Lost %v wrong", m, m.Lost())
				}
			}
			if m.OwnerChanged() {
				ownerMoves++
			}
		}
		if ownerMoves == 0 || len(moves) < ownerMoves {
			t.Fatalf("%d moves, %d owner changes: a membership change should move something", len(moves), ownerMoves)
		}
	}
}

func TestDiffMovesDoNotAliasRings(t *testing.T) {
	old := mustRing(t, nodeIDs(2), ring.LegacyConfig())
	new := mustRing(t, nodeIDs(3), ring.LegacyConfig())
	m := Diff(old, new)[0]
	want := new.PartitionReplicas(m.Partition)
	m.NewReplicas[0] = "mutated"
	if got := new.PartitionReplicas(m.Partition); !slices.Equal(got, want) {
		t.Fatalf("mutating a Move changed the ring: %v", got)
	}
}

func TestDiffDifferentPartitionCountsPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Diff of rings with different partition counts did not panic")
		}
	}()
	Diff(mustRing(t, []string{"a"}, ring.Config{PartitionCount: 7}), mustRing(t, []string{"a"}, ring.LegacyConfig()))
}

func BenchmarkDiff(b *testing.B) {
	old := mustRing(b, nodeIDs(5), ring.LegacyConfig())
	new := mustRing(b, nodeIDs(6), ring.LegacyConfig())
	b.ReportAllocs()
	for b.Loop() {
		_ = Diff(old, new)
	}
}
