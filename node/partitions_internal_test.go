package node

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A hand-off waits for the checks that pinned the partition before it
// exports the counters, and a check that comes after the hand-off cannot
// pin it: it learns where the partition went.
func TestPinHoldsOffHandOff(t *testing.T) {
	tb := newPartitionTable(4)
	tb.setReady(2)
	if ok, _ := tb.pin(2); !ok {
		t.Fatal("pin of a ready partition failed")
	}
	held, _ := tb.handOff(2, "n9")
	if !held {
		t.Fatal("hand-off of a ready partition: not held")
	}
	// While the check's pin is held the hand-off cannot export: it waits
	// until its own deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := tb.waitUnpinned(ctx, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waitUnpinned with the partition pinned = %v, want DeadlineExceeded", err)
	}
	if ok, to := tb.pin(2); ok || to != "n9" {
		t.Fatalf("pin after the hand-off = %v, %q; want false, n9", ok, to)
	}
	tb.unpin(2)
	if err := tb.waitUnpinned(context.Background(), 2); err != nil {
		t.Fatal(err)
	}

	// A released partition (lost to a ring change, counters still here) is
	// held and pinnable; a second hand-off names the first puller.
	tb.setReady(3)
	tb.release(3)
	if ok, _ := tb.pin(3); !ok {
		t.Fatal("pin of a released partition failed")
	}
	tb.unpin(3)
	if held, _ := tb.handOff(3, "n7"); !held {
		t.Fatal("released partition not held")
	}
	if held, to := tb.handOff(3, "n8"); held || to != "n7" {
		t.Fatalf("second hand-off = %v, %q; want false, n7", held, to)
	}
	// Never held: nothing to hand off, nowhere to point.
	if held, to := tb.handOff(1, "n8"); held || to != "" {
		t.Fatalf("hand-off of a partition never held = %v, %q", held, to)
	}
}

// A hand-off that fails after the partition was marked moved gives it back:
// this node holds it again (ready if it owns it), and a later puller gets
// it. handBack for another puller, or of a partition not moved, does nothing.
func TestHandBack(t *testing.T) {
	tb := newPartitionTable(4)
	tb.setReady(1)
	tb.handOff(1, "n5")
	tb.handBack(1, "n6", true) // not the puller it went to
	if st, to := tb.get(1); st != partMoved || to != "n5" {
		t.Fatalf("handBack for another puller changed the partition: %d %q", st, to)
	}
	tb.handBack(1, "n5", true)
	if st := tb.state(1); st != partReady {
		t.Fatalf("after handBack (owned): state %d, want ready", st)
	}
	tb.handOff(1, "n5")
	tb.handBack(1, "n5", false)
	if st := tb.state(1); st != partReleased {
		t.Fatalf("after handBack (not owned): state %d, want released", st)
	}
	if held, _ := tb.handOff(1, "n7"); !held {
		t.Fatal("a handed-back partition is not held")
	}
	tb.handBack(2, "n5", true) // never held
	if st := tb.state(2); st != partNone {
		t.Fatalf("handBack of a partition never held: state %d", st)
	}
}

// Released partitions nobody pulled are let go after the grace period;
// ready, moved and recently released ones are kept.
func TestForgetReleased(t *testing.T) {
	tb := newPartitionTable(5)
	tb.setReady(0)
	tb.setReady(1)
	tb.release(1)
	tb.setReady(2)
	tb.release(2)
	tb.handOff(2, "n4") // pulled: moved, not released
	tb.setPending(3, "n2")
	tb.arrived(3, false) // pulled for a newer owner: released
	if got := tb.forgetReleased(time.Now().Add(-time.Minute).UnixNano()); len(got) != 0 {
		t.Fatalf("forgot %v before the grace period ended", got)
	}
	got := tb.forgetReleased(time.Now().Add(time.Nanosecond).UnixNano())
	if len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("forgot %v, want [1 3]", got)
	}
	want := []uint32{partReady, partNone, partMoved, partNone, partNone}
	for p, st := range want {
		if tb.state(uint32(p)) != st {
			t.Errorf("partition %d: state %d, want %d", p, tb.state(uint32(p)), st)
		}
	}
	if held, to := tb.handOff(1, "n9"); held || to != "" {
		t.Fatalf("a forgotten partition was handed off: %v %q", held, to)
	}
}
