package sched

import (
	"context"
	"math/rand/v2"
	"time"
)

// Sched is everything nondeterministic a part may reach.
type Sched interface {
	// Now reads the clock.
	Now() time.Time
	// Go starts f as concurrent work. The caller owns joining it (a
	// WaitGroup, a result channel); Go does not wait.
	Go(f func())
	// NewTimer fires once, d from Now.
	NewTimer(d time.Duration) Timer
	// NewTicker fires every d (d > 0), dropping ticks a slow reader misses.
	NewTicker(d time.Duration) Ticker
	// WithTimeout is context.WithTimeout on this clock: the context ends
	// with context.DeadlineExceeded d from Now, or with its parent.
	WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
	// Uint64 draws a random number.
	Uint64() uint64
}

// Timer is a one-shot timer.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// Ticker delivers ticks until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Or returns s, or Real when s is nil: the default of every config's
// Sched field.
func Or(s Sched) Sched {
	if s == nil {
		return Real{}
	}
	return s
}

// Real is production: goroutines, the wall clock, math/rand/v2.
type Real struct{}

var _ Sched = Real{}

func (Real) Now() time.Time { return time.Now() }
func (Real) Go(f func())    { go f() }
func (Real) Uint64() uint64 { return rand.Uint64() }

func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

func (Real) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Every calls f every d on s's ticker until f reports done or ctx ends.
func Every(ctx context.Context, s Sched, d time.Duration, f func() (done bool)) {
	t := s.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if f() {
				return
			}
		}
	}
}
