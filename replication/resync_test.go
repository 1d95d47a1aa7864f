package replication

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testwait"
)

func TestPlanResync(t *testing.T) {
	moves := []Move{
		{Partition: 1, OldOwner: "a", NewOwner: "a", OldReplicas: []string{"a", "b"}, NewReplicas: []string{"a", "c"}},      // new replica c
		{Partition: 2, OldOwner: "a", NewOwner: "a", OldReplicas: []string{"a", "b", "c"}, NewReplicas: []string{"a", "c"}}, // b dropped only
		{Partition: 3, OldOwner: "b", NewOwner: "a", OldReplicas: []string{"b", "a"}, NewReplicas: []string{"a", "c"}},      // gained: shipped on install
		{Partition: 4, OldOwner: "b", NewOwner: "b", OldReplicas: []string{"b", "c"}, NewReplicas: []string{"b", "a"}},      // a is the new replica, not the owner
		{Partition: 5, OldOwner: "a", NewOwner: "a", OldReplicas: []string{"a", "b"}, NewReplicas: []string{"a", "b", "d"}}, // d added
		{Partition: 6, OldOwner: "a", NewOwner: "c", OldReplicas: []string{"a", "b"}, NewReplicas: []string{"c", "a"}},      // lost
	}
	got := PlanResync("a", moves)
	if want := []uint32{1, 5}; !slices.Equal(got, want) {
		t.Fatalf("PlanResync = %v, want %v", got, want)
	}
	if got := PlanResync("z", moves); got != nil {
		t.Fatalf("PlanResync for a bystander = %v, want none", got)
	}
}

// A counter already waiting in the queue changed after (or at) the
// snapshot: the resync keeps the waiting state, so the replica never gets an
// older state after a newer one. Counters not waiting are queued from the
// snapshot.
func TestResyncKeepsNewerWaitingStates(t *testing.T) {
	l, p := newLink(), &places{m: map[uint32][]string{1: {"r"}}}
	r := newTestReplicator(t, testConfig(), l, p)
	r.Enqueue([]State{st(1, 7, 5)}) // newer than the snapshot below
	n, err := r.Resync(context.Background(), func(context.Context) ([]State, error) {
		return []State{st(1, 7, 3), st(1, 8, 2)}, nil
	})
	if err != nil || n != 1 {
		t.Fatalf("Resync = %d, %v; want 1 queued (id 8), nil", n, err)
	}
	start(t, r)
	testwait.For(t, 5*time.Second, "both counters at the replica", func() error {
		if len(l.latest("r")) < 2 {
			return errors.New("not yet")
		}
		return nil
	})
	got := l.latest("r")
	if got[7].A != 5 || got[8].A != 2 {
		t.Fatalf("replica holds id7 A=%d, id8 A=%d; want 5 (the newer waiting change) and 2", got[7].A, got[8].A)
	}
	for _, s := range l.received("r") {
		if s.ID == 7 && s.A == 3 {
			t.Fatal("the older snapshot of id 7 was shipped")
		}
	}
}

func TestResyncQueueFullChangesNothing(t *testing.T) {
	cfg := testConfig()
	cfg.QueueLen = 2
	l, p := newLink(), &places{m: map[uint32][]string{1: {"r"}}}
	r := newTestReplicator(t, cfg, l, p)
	r.Enqueue([]State{st(1, 1, 1), st(1, 2, 1)})
	n, err := r.Resync(context.Background(), func(context.Context) ([]State, error) {
		return []State{st(1, 3, 1)}, nil
	})
	if !errors.Is(err, ErrQueueFull) || n != 0 {
		t.Fatalf("Resync = %d, %v; want 0, ErrQueueFull", n, err)
	}
	if s := r.Stats(); s.Pending != 2 || s.Dropped != 0 {
		t.Fatalf("after a refused resync: pending %d dropped %d, want 2 and 0", s.Pending, s.Dropped)
	}
}

func TestResyncExportError(t *testing.T) {
	l, p := newLink(), &places{m: map[uint32][]string{}}
	r := newTestReplicator(t, testConfig(), l, p)
	boom := errors.New("engine closed")
	if _, err := r.Resync(context.Background(), func(context.Context) ([]State, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("Resync = %v, want the export error", err)
	}
}
