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
