package sim

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"iter"
	"time"

	"github.com/weirlimit/weir/internal/sched"
	"github.com/weirlimit/weir/internal/sched/schedtest"
)

// event is one thing due at a simulated time. Ties break by seq (the
// order they were scheduled in), so the heap's order is total.
type event struct {
	at  time.Duration // since the run's start
	seq uint64
	fn  func()
}

type events []*event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *events) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// loop is the simulator's clock and event queue, its coroutines (the
// work the parts start through the seam) and its trace.
type loop struct {
	clock *schedtest.Sim
	start time.Time
	now   time.Duration
	seq   uint64
	queue events

	cur     *task // the coroutine running now (nil: the driver)
	running int   // coroutines resumed and not yet yielded back
	live    int   // coroutines started and not finished

	hash     hash.Hash
	buf      []byte
	records  int
	readable []string // when verbose: the trace as text
	verbose  bool
}

func newLoop(start time.Time, verbose bool) *loop {
	return &loop{clock: schedtest.New(0, start), start: start, hash: sha256.New(), verbose: verbose}
}

// at schedules fn d from now (d < 0 is now).
func (l *loop) after(d time.Duration, fn func()) {
	if d < 0 {
		d = 0
	}
	l.seq++
	heap.Push(&l.queue, &event{at: l.now + d, seq: l.seq, fn: fn})
}

// errStray: a coroutine was still running when its event returned.
var errStray = errors.New("sim: a coroutine of the simulator's was still running after its event")

// step runs the next event due by end; false when none is.
func (l *loop) step(end time.Duration) (bool, error) {
	if len(l.queue) == 0 || l.queue[0].at > end {
		return false, nil
	}
	e := heap.Pop(&l.queue).(*event)
	if e.at > l.now {
		l.clock.Advance(e.at - l.now)
		l.now = e.at
	}
	e.fn()
	if l.running != 0 || l.cur != nil {
		return true, errStray
	}
	return true, nil
}

// runUntil runs every event due by end and moves the clock to end.
func (l *loop) runUntil(end time.Duration) error {
	for {
		ok, err := l.step(end)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
	}
	if end > l.now {
		l.clock.Advance(end - l.now)
		l.now = end
	}
	return nil
}

// rec adds one record to the canonical trace: a kind and integers (no
// pointers, wall times or goroutine ids). text is formatted only when
// the run keeps a readable trace.
func (l *loop) rec(kind byte, a, b, c int64, text func() string) {
	l.buf = append(l.buf[:0], kind)
	l.buf = binary.AppendVarint(l.buf, int64(l.now))
	l.buf = binary.AppendVarint(l.buf, a)
	l.buf = binary.AppendVarint(l.buf, b)
	l.buf = binary.AppendVarint(l.buf, c)
	l.hash.Write(l.buf)
	l.records++
	if l.verbose && text != nil {
		l.readable = append(l.readable, fmt.Sprintf("%9s %s", l.now, text()))
	}
}

// sum is the trace's hash so far.
func (l *loop) sum() string { return fmt.Sprintf("%x", l.hash.Sum(nil)) }

// task is one coroutine: work a part started through the seam (a pull, a
// resync, a replication send). It runs on the driver's behalf only: the
// driver resumes it and waits until it yields (an RPC in flight) or ends.
type task struct {
	owner *host
	next  func() (struct{}, bool)
	yield func(struct{}) bool
	done  bool

	token   uint64 // which wait a wake-up is for
	waiting bool   // suspended in await
	wake    func(any, error)
	val     any
	err     error
}

// spawn starts f as a coroutine of h and runs it until it first waits.
func (l *loop) spawn(h *host, f func()) {
	t := &task{owner: h}
	t.next, _ = iter.Pull(func(yield func(struct{}) bool) {
		t.yield = yield
		f()
	})
	l.live++
	h.tasks = append(h.tasks, t)
	l.resume(t)
}

func (l *loop) resume(t *task) {
	if t.done {
		return
	}
	prev := l.cur
	l.cur = t
	l.running++
	_, ok := t.next()
	l.running--
	l.cur = prev
	if !ok {
		t.done = true
		l.live--
	}
}

// errKilled is what a coroutine of a killed node gets for every wait.
var errKilled = errors.New("sim: node killed")

// await suspends the running coroutine until wake is called with the
// answer of send, or ctx's deadline passes. send starts the message; the
// function it gets answers it (later calls are ignored).
func (l *loop) await(ctx context.Context, send func(answer func(any, error))) (any, error) {
	t := l.cur
	if t == nil {
		panic("sim: await outside a coroutine")
	}
	if !t.owner.up {
		return nil, errKilled
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.token++
	tok := t.token
	answered := false
	answer := func(v any, err error) {
		if answered || t.token != tok || t.done {
			return
		}
		answered = true
		t.val, t.err = v, err
		if t.waiting {
			t.waiting = false
			l.resume(t)
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		l.after(dl.Sub(l.clock.Now()), func() {
			err := ctx.Err()
			if err == nil {
				err = context.DeadlineExceeded
			}
			answer(nil, err)
		})
	}
	t.wake = answer
	send(answer)
	if !answered {
		t.waiting = true // the driver gets its goroutine back until the answer
		t.yield(struct{}{})
	}
	t.wake = nil
	v, err := t.val, t.err
	t.val, t.err = nil, nil
	return v, err
}

// hostSched is one node's seam: the simulator's clock shifted by the
// node's skew, its coroutines for Go.
type hostSched struct {
	*schedtest.Sim
	h *host
}

var _ sched.Sched = hostSched{}

func (s hostSched) Now() time.Time { return s.Sim.Now().Add(s.h.skew) }
func (s hostSched) Go(f func())    { s.h.w.loop.spawn(s.h, f) }
