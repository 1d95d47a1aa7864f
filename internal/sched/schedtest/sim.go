// Package schedtest is the deterministic sched.Sched for tests and
// simulations: a manual clock, queued (or inline) work, seeded randomness.
package schedtest

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/weirlimit/weir/internal/sched"
)

// GoMode is what Sim.Go does with work.
type GoMode int

const (
	// Queue keeps the work for the test to run (RunNext, RunAll), in the
	// order Go was called.
	Queue GoMode = iota
	// Inline runs the work on the caller's goroutine before Go returns.
	Inline
	// Spawn starts a goroutine, as production does: for tests that want
	// only the clock and the randomness under control.
	Spawn
)

// Sim is a deterministic sched.Sched. Its clock moves only by Advance,
// which fires the timers, tickers and deadlines it passes in deadline
// order (ties in creation order). It is safe for concurrent use.
type Sim struct {
	mu    sync.Mutex
	now   time.Time
	mode  GoMode
	rnd   *rand.Rand
	seq   uint64
	due   waits
	queue []func()
}

var _ sched.Sched = (*Sim)(nil)

// New returns a Sim at start whose randomness is drawn from seed and
// whose Go queues work.
func New(seed uint64, start time.Time) *Sim {
	return &Sim{now: start, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// SetGo sets what Go does from now on.
func (s *Sim) SetGo(m GoMode) {
	s.mu.Lock()
	s.mode = m
	s.mu.Unlock()
}

// Now returns the simulated time.
func (s *Sim) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Uint64 draws from the seeded generator.
func (s *Sim) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rnd.Uint64()
}

// Go queues f, runs it inline or starts a goroutine (SetGo).
func (s *Sim) Go(f func()) {
	s.mu.Lock()
	mode := s.mode
	if mode == Queue {
		s.queue = append(s.queue, f)
	}
	s.mu.Unlock()
	switch mode {
	case Inline:
		f()
	case Spawn:
		go f()
	}
}

// Queued is how much work waits to run.
func (s *Sim) Queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// RunNext runs the oldest queued work on the caller's goroutine; false
// when none waits.
func (s *Sim) RunNext() bool {
	s.mu.Lock()
	if len(s.queue) == 0 {
		s.mu.Unlock()
		return false
	}
	f := s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	s.mu.Unlock()
	f()
	return true
}

// RunAll runs queued work, including work queued meanwhile, until none
// waits, and returns how many ran.
func (s *Sim) RunAll() int {
	n := 0
	for s.RunNext() {
		n++
	}
	return n
}

// Advance moves the clock d forward, firing in order everything due on
// the way: each fires with the clock at its deadline.
func (s *Sim) Advance(d time.Duration) {
	s.mu.Lock()
	end := s.now.Add(d)
	s.mu.Unlock()
	for s.fireNext(end) {
	}
	s.mu.Lock()
	if end.After(s.now) {
		s.now = end
	}
	s.mu.Unlock()
}

// Next is the deadline of the next timer, tick or deadline; false when
// nothing waits.
func (s *Sim) Next() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.due) == 0 {
		return time.Time{}, false
	}
	return s.due[0].at, true
}

// fireNext fires the earliest wait due by end; false when none is.
func (s *Sim) fireNext(end time.Time) bool {
	s.mu.Lock()
	if len(s.due) == 0 || s.due[0].at.After(end) {
		s.mu.Unlock()
		return false
	}
	w := heap.Pop(&s.due).(*wait)
	s.now = w.at
	if w.every > 0 {
		w.at = w.at.Add(w.every)
		s.push(w)
	}
	now := s.now
	s.mu.Unlock()
	if w.fire != nil {
		w.fire() // outside the lock: cancelling a context runs its children's cancels
		return true
	}
	select {
	case w.c <- now:
	default: // the reader has not taken the previous tick: dropped, as time.Ticker does
	}
	return true
}

// push schedules w; s.mu held.
func (s *Sim) push(w *wait) {
	s.seq++
	w.seq = s.seq
	heap.Push(&s.due, w)
}

// stop unschedules w, reporting whether it was scheduled.
func (s *Sim) stop(w *wait) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.i < 0 {
		return false
	}
	heap.Remove(&s.due, w.i)
	return true
}

func (s *Sim) after(d, every time.Duration, fire func()) *wait {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &wait{at: s.now.Add(d), every: every, fire: fire, i: -1}
	if fire == nil {
		w.c = make(chan time.Time, 1)
	}
	s.push(w)
	return w
}

// NewTimer fires once when the clock reaches d from now (d <= 0: at the
// next Advance, Advance(0) included).
func (s *Sim) NewTimer(d time.Duration) sched.Timer {
	return simTimer{s, s.after(d, 0, nil)}
}

// NewTicker fires every d of simulated time.
func (s *Sim) NewTicker(d time.Duration) sched.Ticker {
	if d <= 0 {
		panic("schedtest: non-positive ticker interval")
	}
	return simTicker{s, s.after(d, d, nil)}
}

// WithTimeout returns a context that ends with context.DeadlineExceeded
// when the clock reaches d from now (or with its parent).
func (s *Sim) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	inner, cancel := context.WithCancelCause(ctx)
	c := &deadlineCtx{Context: inner, at: s.Now().Add(d)}
	if d <= 0 {
		cancel(context.DeadlineExceeded) // already past, as context.WithTimeout
		return c, func() { cancel(context.Canceled) }
	}
	w := s.after(d, 0, func() { cancel(context.DeadlineExceeded) })
	return c, func() {
		s.stop(w)
		cancel(context.Canceled)
	}
}

type simTimer struct {
	s *Sim
	w *wait
}

func (t simTimer) C() <-chan time.Time { return t.w.c }
func (t simTimer) Stop() bool          { return t.s.stop(t.w) }

type simTicker struct {
	s *Sim
	w *wait
}

func (t simTicker) C() <-chan time.Time { return t.w.c }
func (t simTicker) Stop()               { t.s.stop(t.w) }

// deadlineCtx reports the simulated deadline and ends with
// DeadlineExceeded when it passes.
type deadlineCtx struct {
	context.Context
	at time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.at) {
		return d, true
	}
	return c.at, true
}

func (c *deadlineCtx) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}

// wait is one timer, ticker or deadline.
type wait struct {
	at    time.Time
	every time.Duration // > 0: a ticker
	seq   uint64
	c     chan time.Time
	fire  func() // a deadline's cancel instead of a channel
	i     int    // index in the heap, -1 when not scheduled
}

// waits is a heap by deadline, then creation.
type waits []*wait

func (h waits) Len() int { return len(h) }
func (h waits) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h waits) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *waits) Push(x any) {
	w := x.(*wait)
	w.i = len(*h)
	*h = append(*h, w)
}
func (h *waits) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.i = -1
	return w
}
