package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/weirlimit/weir/internal/checkstream"
	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/limit/limitpb"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// forwarder sends the items bound for one peer on one pipelined
// Peer.ForwardStream, each request tagged with an id its answer carries.
// No goroutine of its own takes the items: a caller whose items find no
// write in progress (and fewer than Config.Inflight requests out) writes
// the request itself, with whatever else queued meanwhile (up to
// Config.MaxBatch items); a caller that finds a write in progress leaves
// its items for the next request, which the writer (or, when the window
// of Inflight requests is full, the stream's receiver as an answer frees
// it) sends. Batches so grow with load and nothing waits on a timer at
// low load. One receiver goroutine per open stream reads the answers and
// hands each caller its results.
//
// Timeouts: a request is answered within Config.Timeout or fails (its
// items are answered unavailable by the caller) and leaves the window; a
// late answer is known by its id and dropped. A stream that has answered
// nothing for Timeout while requests wait is stalled and torn down: every
// request in flight on it fails, and the next write opens a fresh stream.
// A request whose write found the stream already ended (its connection
// broke while idle) was never seen by the peer and goes once more on a
// fresh stream. A caller gives up at its own context without disturbing
// the others. A peer that answers Unimplemented (an older node) gets
// unary Forward RPCs for a while, the requests in flight included.
//
// The forwarder is a wire edge: callers queue domain items and get domain
// results; only the writer converts, one batch at a time (limitpb).
type forwarder struct {
	t       *Table
	dest    string
	stopped chan struct{}      // closed when dest left the cluster (Prune)
	legacy  checkstream.Legacy // the peer lacks ForwardStream: unary Forward for a while

	mu       sync.Mutex // guards the fields below; never held while calling out
	queue    []*Call    // waiting for the next request
	spare    []*Call    // the queue's other buffer
	writing  bool       // a goroutine is writing requests (write)
	inflight int        // requests out (on a stream or unary)
	closed   bool       // stopped or the table closed: no more requests
	st       *stream    // the open stream, if any
	nextID   uint64
	reqs     []*request // free request records

	w   wireItems                 // the writer's request buffer
	req weirv1.CheckStreamRequest // the writer's request message
}

// request is a request in flight on a stream.
type request struct {
	id     uint64
	calls  []*Call
	sent   time.Time
	unsent bool // its write found the stream ended: the peer never saw it (set under mu while pending)
}

// stream is one open Peer.ForwardStream and the requests in flight on it
// (guarded by the forwarder's mu).
type stream struct {
	cc      *grpc.ClientConn
	cs      grpc.BidiStreamingClient[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]
	cancel  context.CancelFunc
	pending []*request // in the order sent
	dead    bool       // torn down or ended: nothing more is written on it
	stalled bool       // torn down because nothing was answered for Timeout
	heard   time.Time  // when it opened or last answered a request
	armed   bool       // timer is running
	timer   *time.Timer
}

// close refuses further requests, fails the queued calls with err and
// tears the stream down (its receiver fails the requests in flight).
func (f *forwarder) close(err error) {
	f.mu.Lock()
	f.closed = true
	q := f.queue
	f.queue = nil
	st := f.st
	f.mu.Unlock()
	answerAll(q, nil, err)
	if st != nil {
		f.teardown(st, false)
	}
}

// start queues c with copies of items[idx] for the peer, coalesced with
// other callers' items, and writes the request itself when no write is in
// progress; an error says c was not queued.
func (f *forwarder) start(ctx context.Context, c *Call, items []limit.Item, idx []int, ver uint64, forwarded bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.items = appendItems(c.items[:0], items, idx, ver, forwarded)
	if f.t.cfg.Tracer != nil {
		tracing.Stamp(ctx, c.items, !forwarded)
	}
	c.err, c.tried = nil, false
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		if f.pruned() {
			return f.gone()
		}
		return ErrClosed
	}
	f.queue = append(f.queue, c)
	write := f.takeWrite()
	f.mu.Unlock()
	if write {
		f.write()
	}
	return nil
}

// takeWrite reports whether the caller (f.mu held) becomes the writer:
// calls are queued, no write is in progress and the window has room.
func (f *forwarder) takeWrite() bool {
	if f.writing || f.closed || len(f.queue) == 0 || f.inflight >= f.t.cfg.Inflight {
		return false
	}
	f.writing = true
	return true
}

// pruned reports whether dest left the cluster (Prune).
func (f *forwarder) pruned() bool {
	select {
	case <-f.stopped:
		return true
	default:
		return false
	}
}

func (f *forwarder) gone() error {
	return limit.Errorf(limit.ErrUnavailable, "forward: member %s left the cluster", f.dest)
}

// answer hands the call its results (converted from the wire) or err.
func (c *Call) answer(got []*weirv1.CheckResult, err error) {
	if err != nil {
		c.err = err
	} else {
		c.res = slices.Grow(c.res[:0], len(got))[:len(got)]
		for i, p := range got {
			if p != nil {
				c.res[i] = limitpb.ResultFromProto(p)
			} else {
				c.res[i] = limit.Result{}
			}
		}
	}
	c.done <- struct{}{}
}

// answerAll answers the calls of one request: each its own share of got,
// in order, or all err.
func answerAll(calls []*Call, got []*weirv1.CheckResult, err error) {
	for _, c := range calls {
		if err != nil {
			c.answer(nil, err)
			continue
		}
		k := len(c.items)
		c.answer(got[:k], nil)
		got = got[k:]
	}
}

// write sends the queued calls as requests while the window has room,
// then gives the write role up. Only the goroutine that took the role
// (takeWrite) calls it.
func (f *forwarder) write() {
	max := f.t.cfg.MaxBatch
	for {
		f.mu.Lock()
		if f.closed || len(f.queue) == 0 || f.inflight >= f.t.cfg.Inflight {
			f.writing = false
			f.mu.Unlock()
			return
		}
		// Take calls up to max items (at least one call); the rest stay
		// queued for the next request.
		k, count := 0, 0
		for k < len(f.queue) && (k == 0 || count+len(f.queue[k].items) <= max) {
			count += len(f.queue[k].items)
			k++
		}
		batch := f.queue[:k]
		f.spare = append(f.spare[:0], f.queue[k:]...)
		f.queue, f.spare = f.spare, f.queue
		f.inflight++
		f.mu.Unlock()
		f.send(batch)
		clear(batch)
	}
}

// send writes batch as one request (counted in f.inflight); its calls are
// answered by the stream's receiver, by a unary RPC or here on failure.
func (f *forwarder) send(batch []*Call) {
	if f.t.cfg.Tracer != nil {
		if span := f.t.traceForward(f.dest, batch); span != nil {
			defer span.End() // the batch's write (its answer comes to the receiver)
		}
	}
	items := f.w.set(batch)
	f.t.batch.Observe(float64(len(items)))
	f.t.forwarded.Add(float64(len(items)))
	if f.legacy.Active() {
		f.unary(batch)
		return
	}
	st, err := f.stream()
	if err != nil {
		f.fail(batch, err)
		return
	}
	r := f.newReq(batch)
	f.mu.Lock()
	if st.dead { // torn down since stream(): never written
		f.mu.Unlock()
		f.requeue(r)
		return
	}
	st.pending = append(st.pending, r)
	if !st.armed {
		st.armed = true
		st.timer.Reset(f.t.cfg.Timeout)
	}
	f.mu.Unlock()
	f.req.Id, f.req.Items = r.id, items
	err = st.cs.Send(&f.req)
	f.req.Items = nil
	if err != nil {
		// The stream has ended; its receiver answers the requests in
		// flight (this one resent if the peer never saw it, and if the
		// receiver has not taken it already).
		f.mu.Lock()
		if slices.Contains(st.pending, r) {
			r.unsent = errors.Is(err, io.EOF)
		}
		f.mu.Unlock()
		f.teardown(st, false)
	}
}

// newReq takes a request record for batch (the calls are copied).
func (f *forwarder) newReq(batch []*Call) *request {
	f.mu.Lock()
	f.nextID++
	var r *request
	if k := len(f.reqs); k > 0 {
		r, f.reqs = f.reqs[k-1], f.reqs[:k-1]
	} else {
		r = &request{}
	}
	r.id = f.nextID
	f.mu.Unlock()
	r.calls = append(r.calls[:0], batch...)
	r.sent, r.unsent = time.Now(), false
	return r
}

// freeReq returns a record once its calls are answered.
func (f *forwarder) freeReq(r *request) {
	clear(r.calls)
	r.calls = r.calls[:0]
	f.mu.Lock()
	f.reqs = append(f.reqs, r)
	f.mu.Unlock()
}

// fail answers every call of a request with err and frees its window slot.
func (f *forwarder) fail(batch []*Call, err error) {
	answerAll(batch, nil, err)
	f.settle()
}

// settle frees a window slot and, when calls are queued and nobody
// writes, writes them on this goroutine.
func (f *forwarder) settle() {
	f.mu.Lock()
	f.inflight--
	write := f.takeWrite()
	f.mu.Unlock()
	if write {
		f.write()
	}
}

// requeue puts a request the peer never saw back at the head of the queue,
// once per call; a call already resent fails.
func (f *forwarder) requeue(r *request) {
	f.mu.Lock()
	var again, failed []*Call
	for _, c := range r.calls {
		if c.tried || f.closed {
			failed = append(failed, c)
			continue
		}
		c.tried = true
		again = append(again, c)
	}
	f.queue = append(again, f.queue...)
	f.mu.Unlock()
	answerAll(failed, nil, fmt.Errorf("peer %s: stream ended before the request was written", f.dest))
	f.freeReq(r)
	f.settle()
}

// stream returns the open stream to the peer, opening one (and its
// receiver) if there is none or the peer's connection changed.
func (f *forwarder) stream() (*stream, error) {
	cc, err := f.t.MemberConn(f.dest)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	st := f.st
	f.mu.Unlock()
	if st != nil && st.cc == cc {
		return st, nil
	}
	if st != nil {
		f.teardown(st, false)
	}
	if f.t.ctx.Err() != nil {
		return nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(f.t.ctx)
	cs, err := weirv1.NewPeerClient(cc).ForwardStream(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	st = &stream{cc: cc, cs: cs, cancel: cancel, heard: time.Now()}
	st.timer = time.AfterFunc(time.Hour, func() { f.watch(st) })
	st.timer.Stop()
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		cancel()
		return nil, ErrClosed
	}
	f.st = st
	f.mu.Unlock()
	if !f.t.goFunc(func() { f.receive(st) }) {
		f.teardown(st, false)
		return nil, ErrClosed
	}
	return st, nil
}

// watch runs when a stream's timer fires (the timer runs only while
// requests are in flight, set for the oldest one's deadline). The requests
// that have waited Timeout are answered unavailable and leave the window
// (their late answers are dropped by id); if the stream has answered
// nothing for that long either, it is stalled and torn down, and the rest
// fail with it. Otherwise the timer waits for the next deadline.
func (f *forwarder) watch(st *stream) {
	timeout := f.t.cfg.Timeout
	now := time.Now()
	f.mu.Lock()
	k := 0
	for k < len(st.pending) && now.Sub(st.pending[k].sent) >= timeout {
		k++
	}
	var expired []*request
	stalled := false
	if !st.dead && k > 0 {
		expired = slices.Clone(st.pending[:k])
		st.pending = slices.Delete(st.pending, 0, k)
		stalled = now.Sub(st.heard) >= timeout
	}
	if st.dead || stalled || len(st.pending) == 0 {
		st.armed = false
	} else {
		st.timer.Reset(timeout - now.Sub(st.pending[0].sent))
	}
	f.mu.Unlock()
	err := fmt.Errorf("peer %s: no answer within %v: %w", f.dest, timeout, context.DeadlineExceeded)
	for _, r := range expired {
		answerAll(r.calls, nil, err)
		f.freeReq(r)
		f.settle()
	}
	if stalled {
		f.teardown(st, true)
	}
}

// teardown ends st: nothing more is written on it, and its receiver
// answers the requests in flight.
func (f *forwarder) teardown(st *stream, stalled bool) {
	f.mu.Lock()
	if !st.dead {
		st.dead, st.stalled = true, stalled
	}
	if f.st == st {
		f.st = nil
	}
	f.mu.Unlock()
	st.timer.Stop()
	st.cancel()
}

// receive reads st's answers and hands each request's calls their
// results until the stream ends, then answers what is still in flight.
func (f *forwarder) receive(st *stream) {
	var resp weirv1.CheckStreamResponse
	var err error
	for {
		if err = st.cs.RecvMsg(&resp); err != nil {
			break
		}
		f.mu.Lock()
		r := st.take(resp.GetId())
		if r != nil && len(st.pending) == 0 && st.armed {
			st.armed = false
			st.timer.Stop()
		}
		st.heard = time.Now()
		late := r == nil && resp.GetId() <= f.nextID // answered after its deadline (watch)
		f.mu.Unlock()
		if late {
			continue
		}
		if r == nil {
			err = fmt.Errorf("peer %s answered request %d, which was never sent", f.dest, resp.GetId())
			break
		}
		if bad := f.deliver(st, r, &resp); bad != nil {
			err = bad
			break
		}
	}
	f.teardown(st, false)
	f.mu.Lock()
	pend, stalled := st.pending, st.stalled
	st.pending = nil
	f.mu.Unlock()
	switch {
	case stalled:
		err = fmt.Errorf("peer %s: no answer within %v: %w", f.dest, f.t.cfg.Timeout, context.DeadlineExceeded)
	case f.t.ctx.Err() != nil:
		err = ErrClosed
	case f.pruned():
		err = f.gone()
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("peer %s: stream ended", f.dest)
	}
	legacy := f.legacy.Saw(err)
	for _, r := range pend {
		switch {
		case legacy:
			f.unary(r.calls)
			f.freeReq(r)
		case r.unsent:
			f.requeue(r)
		default:
			answerAll(r.calls, nil, err)
			f.freeReq(r)
			f.settle()
		}
	}
}

// take removes the request with id from the ones in flight (f.mu held).
func (st *stream) take(id uint64) *request {
	for i, r := range st.pending {
		if r.id == id {
			st.pending = slices.Delete(st.pending, i, i+1)
			return r
		}
	}
	return nil
}

// deliver answers r's calls from resp. A malformed answer (the wrong
// number of results) fails them and is returned: the stream is dropped
// first, as the peer does not speak the protocol, so their next calls go
// on a fresh one.
func (f *forwarder) deliver(st *stream, r *request, resp *weirv1.CheckStreamResponse) error {
	var err, bad error
	n := 0
	for _, c := range r.calls {
		n += len(c.items)
	}
	switch {
	case resp.GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED:
		err = fmt.Errorf("peer %s: %v: %s", f.dest, resp.GetErrorCode(), resp.GetError())
	case len(resp.GetResults()) != n:
		err = fmt.Errorf("peer %s answered %d results for %d items", f.dest, len(resp.GetResults()), n)
		bad = err
		f.teardown(st, false)
	}
	answerAll(r.calls, resp.GetResults(), err)
	f.freeReq(r)
	f.settle()
	return bad
}

// unary sends a request as a unary Forward RPC (the peer lacks
// ForwardStream) on a goroutine of its own, which answers the calls.
func (f *forwarder) unary(batch []*Call) {
	calls := slices.Clone(batch)
	var w wireItems // not the writer's: this may run on the receiver
	req := &weirv1.CheckRequest{Items: w.set(calls)}
	if !f.t.goFunc(func() {
		got, err := f.forwardUnary(req)
		answerAll(calls, got, err)
		f.settle()
	}) {
		f.fail(calls, ErrClosed)
	}
}

// forwardUnary decides req's items at the peer with one unary Forward RPC
// within Timeout.
func (f *forwarder) forwardUnary(req *weirv1.CheckRequest) ([]*weirv1.CheckResult, error) {
	cc, err := f.t.MemberConn(f.dest)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(f.t.ctx, f.t.cfg.Timeout)
	defer cancel()
	resp, err := weirv1.NewPeerClient(cc).Forward(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(resp.Results) != len(req.Items) {
		return nil, fmt.Errorf("peer %s answered %d results for %d items", f.dest, len(resp.Results), len(req.Items))
	}
	return resp.Results, nil
}
