package schedtest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fired reports what c holds now, without waiting.
func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case at := <-c:
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestTimerFiresWhenTheClockReachesIt(t *testing.T) {
	s := New(1, t0)
	tm := s.NewTimer(3 * time.Second)
	s.Advance(2 * time.Second)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("fired early")
	}
	s.Advance(time.Second)
	if at, ok := fired(tm.C()); !ok || !at.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("fired %v %v, want at t0+3s", at, ok)
	}
	if tm.Stop() {
		t.Error("Stop after firing reported it stopped the timer")
	}
	if got := s.Now(); !got.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("Now = %v", got)
	}
}

func TestStoppedTimerNeverFires(t *testing.T) {
	s := New(1, t0)
	tm := s.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	s.Advance(time.Hour)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("a stopped timer fired")
	}
	if _, ok := s.Next(); ok {
		t.Error("a stopped timer is still scheduled")
	}
}

func TestTickerDropsMissedTicksAndStops(t *testing.T) {
	s := New(1, t0)
	tk := s.NewTicker(time.Second)
	s.Advance(5 * time.Second) // nobody reads: one tick waits, four are dropped
	at, ok := fired(tk.C())
	if !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("first tick %v %v, want t0+1s", at, ok)
	}
	if _, ok := fired(tk.C()); ok {
		t.Fatal("more than one tick buffered")
	}
	s.Advance(time.Second)
	if at, ok := fired(tk.C()); !ok || !at.Equal(t0.Add(6*time.Second)) {
		t.Fatalf("tick %v %v, want t0+6s", at, ok)
	}
	tk.Stop()
	s.Advance(time.Hour)
	if _, ok := fired(tk.C()); ok {
		t.Fatal("a stopped ticker ticked")
	}
}

// TestFiringOrder: waits fire in deadline order, ties in creation order,
// each with the clock at its own deadline.
func TestFiringOrder(t *testing.T) {
	s := New(1, t0)
	var order []string
	var clock []time.Duration
	record := func(name string) func() {
		return func() {
			order = append(order, name)
			clock = append(clock, s.Now().Sub(t0))
		}
	}
	s.after(2*time.Second, 0, record("b"))
	s.after(time.Second, 0, record("a"))
	s.after(2*time.Second, 0, record("c"))
	s.after(1500*time.Millisecond, time.Second, record("tick"))
	s.Advance(3 * time.Second)
	want := []string{"a", "tick", "b", "c", "tick"}
	if !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	wantClock := []time.Duration{time.Second, 1500 * time.Millisecond, 2 * time.Second, 2 * time.Second, 2500 * time.Millisecond}
	if !slices.Equal(clock, wantClock) {
		t.Errorf("clock at firing %v, want %v", clock, wantClock)
	}
}

func TestWithTimeoutEndsOnTheSimulatedClock(t *testing.T) {
	s := New(1, t0)
	ctx, cancel := s.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("Deadline = %v %v", d, ok)
	}
	s.Advance(time.Second)
	if ctx.Err() != nil {
		t.Fatal("ended early")
	}
	s.Advance(time.Second)
	select {
	case <-ctx.Done():
	default:
		t.Fatal("not done at its deadline")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("Err = %v, want DeadlineExceeded", ctx.Err())
	}
	child, cc := context.WithCancel(ctx)
	defer cc()
	if !errors.Is(child.Err(), context.Canceled) && !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Errorf("child of an ended context: Err = %v", child.Err())
	}
}

func TestWithTimeoutCancelAndParent(t *testing.T) {
	s := New(1, t0)
	ctx, cancel := s.WithTimeout(context.Background(), time.Second)
	cancel()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("cancelled: Err = %v", ctx.Err())
	}
	if _, ok := s.Next(); ok {
		t.Error("a cancelled deadline is still scheduled")
	}
	past, cancelPast := s.WithTimeout(context.Background(), 0)
	defer cancelPast()
	if !errors.Is(past.Err(), context.DeadlineExceeded) {
		t.Errorf("no time left: Err = %v, want DeadlineExceeded at once", past.Err())
	}
	parent, pc := context.WithCancel(context.Background())
	ctx, cancel = s.WithTimeout(parent, time.Hour)
	defer cancel()
	pc()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("parent cancelled: Err = %v", ctx.Err())
	}
}

func TestGoModes(t *testing.T) {
	s := New(1, t0)
	var ran []int
	s.Go(func() { ran = append(ran, 1) })
	s.Go(func() {
		ran = append(ran, 2)
		s.Go(func() { ran = append(ran, 3) }) // queued while running
	})
	if len(ran) != 0 || s.Queued() != 2 {
		t.Fatalf("queue mode ran %v, %d queued", ran, s.Queued())
	}
	if n := s.RunAll(); n != 3 || !slices.Equal(ran, []int{1, 2, 3}) {
		t.Fatalf("RunAll ran %d: %v", n, ran)
	}
	s.SetGo(Inline)
	s.Go(func() { ran = append(ran, 4) })
	if !slices.Equal(ran, []int{1, 2, 3, 4}) {
		t.Fatalf("inline did not run before Go returned: %v", ran)
	}
	s.SetGo(Spawn)
	done := make(chan struct{})
	s.Go(func() { close(done) })
	<-done
	if s.RunNext() {
		t.Error("spawned work was queued")
	}
}

func TestRandomnessFollowsTheSeed(t *testing.T) {
	draw := func(seed uint64) []uint64 {
		s := New(seed, t0)
		return []uint64{s.Uint64(), s.Uint64(), s.Uint64()}
	}
	if a, b := draw(7), draw(7); !slices.Equal(a, b) {
		t.Errorf("same seed drew %v and %v", a, b)
	}
	if a, b := draw(7), draw(8); slices.Equal(a, b) {
		t.Errorf("seeds 7 and 8 drew the same %v", a)
	}
}
