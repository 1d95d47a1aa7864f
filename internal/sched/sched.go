package sched

import (
	"context"
	"math/rand/v2"
	"sync"
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

// NewTicker fires every d. A period of whole seconds ticks at the wall
// clock's multiples of it (untilNext), so a process's loops of one or two
// seconds (cluster, hand-off, sweeps, persistence, ops, rejoin) wake it
// once together instead of each at its own phase; its first tick comes
// within d, never later. Shorter periods start d from now.
func (Real) NewTicker(d time.Duration) Ticker {
	if d%time.Second != 0 {
		return realTicker{time.NewTicker(d)}
	}
	return newAligned(d)
}

func (Real) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// alignedTicker is Real's ticker of whole seconds: a timer re-armed at
// each tick for the next multiple of d.
type alignedTicker struct {
	c       chan time.Time // one tick kept for a slow reader, as time.Ticker
	d       time.Duration
	mu      sync.Mutex // orders Stop against fire's re-arm
	t       *time.Timer
	stopped bool
}

func newAligned(d time.Duration) *alignedTicker {
	a := &alignedTicker{c: make(chan time.Time, 1), d: d}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.t = time.AfterFunc(untilNext(time.Now(), d), a.fire)
	return a
}

func (a *alignedTicker) fire() {
	now := time.Now()
	select {
	case a.c <- now:
	default: // the reader has not taken the last tick: drop this one
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.stopped {
		a.t.Reset(untilNext(now, a.d))
	}
}

func (a *alignedTicker) C() <-chan time.Time { return a.c }

func (a *alignedTicker) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	a.t.Stop()
}

// untilNext is how long from now to the next multiple of d since the Unix
// epoch (d itself when now is one).
func untilNext(now time.Time, d time.Duration) time.Duration {
	return d - time.Duration(now.UnixNano()%int64(d))
}

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
