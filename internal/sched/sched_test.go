package sched

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRealFiresAndEnds(t *testing.T) {
	var s Sched = Real{}
	if d := time.Since(s.Now()); d < 0 || d > time.Minute {
		t.Fatalf("Now is %v away from the wall clock", d)
	}
	done := make(chan struct{})
	s.Go(func() { close(done) })
	<-done
	tm := s.NewTimer(time.Millisecond)
	<-tm.C()
	if tm.Stop() {
		t.Error("Stop after firing reported true")
	}
	tk := s.NewTicker(time.Millisecond)
	<-tk.C()
	tk.Stop()
	ctx, cancel := s.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("Err = %v", ctx.Err())
	}
	if s.Uint64() == s.Uint64() && s.Uint64() == s.Uint64() {
		t.Error("four equal draws in a row")
	}
	if Or(nil) != (Real{}) {
		t.Error("Or(nil) is not Real")
	}
}

// A ticker of whole seconds ticks at the wall clock's multiples of its
// period: two started apart wake the process together.
func TestUntilNextAligns(t *testing.T) {
	base := time.Unix(1_700_000_000, 0) // a whole second
	for _, c := range []struct {
		at   time.Duration // after base
		d    time.Duration
		want time.Duration
	}{
		{0, time.Second, time.Second},
		{300 * time.Millisecond, time.Second, 700 * time.Millisecond},
		{999 * time.Millisecond, time.Second, time.Millisecond},
		{time.Second + 1, 2 * time.Second, time.Second - 1}, // 1_700_000_000 is even
		{1500 * time.Millisecond, 2 * time.Second, 500 * time.Millisecond},
	} {
		if got := untilNext(base.Add(c.at), c.d); got != c.want {
			t.Errorf("untilNext(base+%v, %v) = %v, want %v", c.at, c.d, got, c.want)
		}
	}
}

func TestAlignedTickerTicksAndStops(t *testing.T) {
	tk := Real{}.NewTicker(time.Second)
	if _, ok := tk.(*alignedTicker); !ok {
		t.Fatalf("a 1 s ticker is %T, not aligned", tk)
	}
	<-tk.C()
	<-tk.C()
	tk.Stop()
	a := tk.(*alignedTicker)
	a.mu.Lock()
	stopped := a.stopped
	a.mu.Unlock()
	if !stopped {
		t.Fatal("Stop left the ticker armed")
	}
	select {
	case <-tk.C():
		t.Fatal("a tick after Stop")
	case <-time.After(1100 * time.Millisecond):
	}
	short := (Real{}).NewTicker(100 * time.Millisecond)
	defer short.Stop()
	if _, ok := short.(realTicker); !ok {
		t.Fatal("a 100 ms ticker is aligned")
	}
}
