package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/weirlimit/weir/internal/checkstream"
	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/limit/limitpb"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// peerPool keeps one gRPC connection per peer address. The map is
// replaced, never changed, so the check path reads it without a lock; mu
// serializes the (rare) dials.
type peerPool struct {
	mu    sync.Mutex
	conns atomic.Pointer[map[string]*grpc.ClientConn] // nil once closed
	opts  []grpc.DialOption                           // set once by New, before any dial (credentials included)
}

func newPeerPool() *peerPool {
	p := &peerPool{}
	p.conns.Store(&map[string]*grpc.ClientConn{})
	return p
}

func (p *peerPool) conn(addr string) (*grpc.ClientConn, error) {
	if m := p.conns.Load(); m != nil {
		if c, ok := (*m)[addr]; ok {
			return c, nil
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.conns.Load()
	if m == nil {
		return nil, ErrClosed
	}
	if c, ok := (*m)[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, err
	}
	next := make(map[string]*grpc.ClientConn, len(*m)+1)
	for a, cc := range *m {
		next[a] = cc
	}
	next[addr] = c
	p.conns.Store(&next)
	return c, nil
}

func (p *peerPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.conns.Swap(nil); m != nil {
		for _, c := range *m {
			_ = c.Close()
		}
	}
}

// peerClient returns a Peer client for the member id in the current view.
func (n *Node) peerClient(id string) (weirv1.PeerClient, error) {
	c, err := n.peerConn(id)
	if err != nil {
		return nil, err
	}
	return weirv1.NewPeerClient(c), nil
}

// peerConn returns the connection to the member id in the current view.
func (n *Node) peerConn(id string) (*grpc.ClientConn, error) {
	v := n.cluster.View()
	if v == nil {
		return nil, fmt.Errorf("%w: no view", errUnavailable)
	}
	addr, ok := v.Addr(id)
	if !ok {
		return nil, fmt.Errorf("%w: unknown member %q", errUnavailable, id)
	}
	return n.peers.conn(addr)
}

// fwdTable is the forwarder of each destination. The map is replaced,
// never changed (under mu, by forwarder and pruneForwarders), so the check
// path finds a forwarder with an atomic load.
type fwdTable struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]*forwarder]
}

// forwarder sends the items bound for one peer on one pipelined
// Peer.ForwardStream, each request tagged with an id its answer carries.
// No goroutine of its own takes the items: a caller whose items find no
// write in progress (and fewer than ForwardInflight requests out) writes
// the request itself, with whatever else queued meanwhile (up to
// ForwardMaxBatch items); a caller that finds a write in progress leaves
// its items for the next request, which the writer (or, when the window of
// ForwardInflight requests is full, the stream's receiver as an answer
// frees it) sends. Batches so grow with load and nothing waits on a timer
// at low load. One receiver goroutine per open stream reads the answers
// and hands each caller its results.
//
// Timeouts: a request is answered within ForwardTimeout or fails (its
// items are answered unavailable by check) and leaves the window; a late
// answer is known by its id and dropped. A stream that has answered
// nothing for ForwardTimeout while requests wait is stalled and torn
// down: every request in flight on it fails, and the next write opens a
// fresh stream. A request whose write found the stream already ended
// (its connection broke while idle) was never seen by the peer and goes
// once more on a fresh stream. A caller gives up at its own context
// without disturbing the others. A peer that answers Unimplemented (an
// older node) gets unary Forward RPCs for a while, the requests in flight
// included.
//
// The forwarder is a wire edge: callers queue domain items and get domain
// results; only the writer converts, one batch at a time (limitpb).
type forwarder struct {
	n       *Node
	dest    string
	stopped chan struct{}      // closed when dest left the cluster (pruneForwarders)
	legacy  checkstream.Legacy // the peer lacks ForwardStream: unary Forward for a while

	mu       sync.Mutex // guards the fields below; never held while calling out
	queue    []*fwdCall // waiting for the next request
	spare    []*fwdCall // the queue's other buffer
	writing  bool       // a goroutine is writing requests (write)
	inflight int        // requests out (on a stream or unary)
	closed   bool       // stopped or the node closed: no more requests
	st       *fwdStream // the open stream, if any
	nextID   uint64
	reqs     []*fwdReq // free request records

	w   wireItems                 // the writer's request buffer
	req weirv1.CheckStreamRequest // the writer's request message
}

// fwdCall is one check's items bound for the peer. Calls are pooled
// (callPool); a call whose caller gave up before its answer is left to
// the garbage collector instead, as the answer may still come.
type fwdCall struct {
	items []limit.Item
	res   []limit.Result
	err   error
	done  chan struct{} // one token per answer
	tried bool          // already resent once (never written on a stream that had ended)
}

// fwdReq is a request in flight on a stream.
type fwdReq struct {
	id     uint64
	calls  []*fwdCall
	sent   time.Time
	unsent bool // its write found the stream ended: the peer never saw it (set under mu while pending)
}

// fwdStream is one open Peer.ForwardStream and the requests in flight on
// it (guarded by the forwarder's mu).
type fwdStream struct {
	cc      *grpc.ClientConn
	cs      grpc.BidiStreamingClient[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]
	cancel  context.CancelFunc
	pending []*fwdReq // in the order sent
	dead    bool      // torn down or ended: nothing more is written on it
	stalled bool      // torn down because nothing was answered for ForwardTimeout
	heard   time.Time // when it opened or last answered a request
	armed   bool      // timer is running
	timer   *time.Timer
}

var callPool = sync.Pool{New: func() any { return &fwdCall{done: make(chan struct{}, 1)} }}

func (n *Node) forwarder(dest string) *forwarder {
	if m := n.fwd.m.Load(); m != nil {
		if f, ok := (*m)[dest]; ok {
			return f
		}
	}
	n.fwd.mu.Lock()
	defer n.fwd.mu.Unlock()
	var cur map[string]*forwarder
	if m := n.fwd.m.Load(); m != nil {
		cur = *m
	}
	if f, ok := cur[dest]; ok {
		return f
	}
	f := &forwarder{n: n, dest: dest, stopped: make(chan struct{})}
	next := make(map[string]*forwarder, len(cur)+1)
	for d, g := range cur {
		next[d] = g
	}
	next[dest] = f
	n.fwd.m.Store(&next)
	return f
}

// pruneForwarders stops the forwarders of destinations that are no longer
// live members (they left or died): their streams end and their queued
// calls fail. A member that comes back gets a new forwarder.
func (n *Node) pruneForwarders(live map[string]member) {
	n.fwd.mu.Lock()
	defer n.fwd.mu.Unlock()
	m := n.fwd.m.Load()
	if m == nil {
		return
	}
	var next map[string]*forwarder
	for dest, f := range *m {
		if _, ok := live[dest]; ok {
			continue
		}
		if next == nil {
			next = make(map[string]*forwarder, len(*m))
			for d, g := range *m {
				next[d] = g
			}
		}
		close(f.stopped)
		f.close(f.gone())
		delete(next, dest)
	}
	if next != nil {
		n.fwd.m.Store(&next)
	}
}

// forwarders is how many destinations have a forwarder.
func (n *Node) forwarders() int {
	if m := n.fwd.m.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// closeForwarders ends every stream and fails the calls still queued
// (after n.wg is joined).
func (n *Node) closeForwarders() {
	n.fwd.mu.Lock()
	defer n.fwd.mu.Unlock()
	if m := n.fwd.m.Load(); m != nil {
		for _, f := range *m {
			f.close(ErrClosed)
		}
	}
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
	for _, c := range q {
		c.answer(nil, err)
	}
	if st != nil {
		f.teardown(st, false)
	}
}

// start queues items (copied from items[idx], each carrying at least
// rule version ver and its hop count, see forwardItems) for the peer,
// coalesced with other callers' items, and writes the request itself
// when no write is in progress; wait returns the answer.
func (f *forwarder) start(ctx context.Context, items []limit.Item, idx []int, ver uint64, forwarded bool) (*fwdCall, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := callPool.Get().(*fwdCall)
	c.items = appendForwardItems(c.items[:0], items, idx, ver, forwarded)
	if f.n.tracer != nil {
		tracing.Stamp(ctx, c.items, !forwarded)
	}
	c.err, c.tried = nil, false
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		callPool.Put(c)
		select {
		case <-f.stopped:
			return nil, f.gone()
		default:
			return nil, ErrClosed
		}
	}
	f.queue = append(f.queue, c)
	write := f.takeWrite()
	f.mu.Unlock()
	if write {
		f.write()
	}
	return c, nil
}

// takeWrite reports whether the caller (f.mu held) becomes the writer:
// calls are queued, no write is in progress and the window has room.
func (f *forwarder) takeWrite() bool {
	if f.writing || f.closed || len(f.queue) == 0 || f.inflight >= f.n.cfg.ForwardInflight {
		return false
	}
	f.writing = true
	return true
}

func (f *forwarder) gone() error {
	return fmt.Errorf("%w: member %s left the cluster", errUnavailable, f.dest)
}

// wait copies the answer of a call queued by start into res at idx (one
// result per item, in order), or returns why there is none.
func (f *forwarder) wait(ctx context.Context, c *fwdCall, res []limit.Result, idx []int) error {
	select {
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-f.n.ctx.Done():
		return ErrClosed
	case <-f.stopped:
		// The member is gone: a call already answered keeps its answer,
		// any other fails rather than wait for a stream torn down.
		select {
		case <-c.done:
		default:
			return f.gone()
		}
	}
	err := c.err
	if err == nil {
		for j, i := range idx {
			res[i] = c.res[j]
		}
	}
	clear(c.res)
	c.res, c.err = c.res[:0], nil
	callPool.Put(c)
	return err
}

// answer hands the call its results (converted from the wire) or err.
func (c *fwdCall) answer(got []*weirv1.CheckResult, err error) {
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

// write sends the queued calls as requests while the window has room,
// then gives the write role up. Only the goroutine that took the role
// (takeWrite) calls it.
func (f *forwarder) write() {
	max := f.n.cfg.ForwardMaxBatch
	for {
		f.mu.Lock()
		if f.closed || len(f.queue) == 0 || f.inflight >= f.n.cfg.ForwardInflight {
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
func (f *forwarder) send(batch []*fwdCall) {
	if f.n.tracer != nil {
		if span := f.n.traceForward(f.dest, batch); span != nil {
			defer span.End() // the batch's write (its answer comes to the receiver)
		}
	}
	items := f.w.set(batch)
	f.n.met.forwardBatch.Observe(float64(len(items)))
	f.n.met.forwarded.Add(float64(len(items)))
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
		st.timer.Reset(f.n.cfg.ForwardTimeout)
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
func (f *forwarder) newReq(batch []*fwdCall) *fwdReq {
	f.mu.Lock()
	f.nextID++
	var r *fwdReq
	if k := len(f.reqs); k > 0 {
		r, f.reqs = f.reqs[k-1], f.reqs[:k-1]
	} else {
		r = &fwdReq{}
	}
	r.id = f.nextID
	f.mu.Unlock()
	r.calls = append(r.calls[:0], batch...)
	r.sent, r.unsent = time.Now(), false
	return r
}

// freeReq returns a record once its calls are answered.
func (f *forwarder) freeReq(r *fwdReq) {
	clear(r.calls)
	r.calls = r.calls[:0]
	f.mu.Lock()
	f.reqs = append(f.reqs, r)
	f.mu.Unlock()
}

// fail answers every call of a request with err and frees its window slot.
func (f *forwarder) fail(batch []*fwdCall, err error) {
	for _, c := range batch {
		c.answer(nil, err)
	}
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
func (f *forwarder) requeue(r *fwdReq) {
	f.mu.Lock()
	var again, failed []*fwdCall
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
	for _, c := range failed {
		c.answer(nil, fmt.Errorf("peer %s: stream ended before the request was written", f.dest))
	}
	f.freeReq(r)
	f.settle()
}

// stream returns the open stream to the peer, opening one (and its
// receiver) if there is none or the peer's connection changed.
func (f *forwarder) stream() (*fwdStream, error) {
	cc, err := f.n.peerConn(f.dest)
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
	if f.n.ctx.Err() != nil {
		return nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(f.n.ctx)
	cs, err := weirv1.NewPeerClient(cc).ForwardStream(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	st = &fwdStream{cc: cc, cs: cs, cancel: cancel, heard: time.Now()}
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
	f.n.goFunc(func() { f.receive(st) })
	return st, nil
}

// watch runs when a stream's timer fires (the timer runs only while
// requests are in flight, set for the oldest one's deadline). The requests
// that have waited ForwardTimeout are answered unavailable and leave the
// window (their late answers are dropped by id); if the stream has
// answered nothing for that long either, it is stalled and torn down, and
// the rest fail with it. Otherwise the timer waits for the next deadline.
func (f *forwarder) watch(st *fwdStream) {
	timeout := f.n.cfg.ForwardTimeout
	now := time.Now()
	f.mu.Lock()
	k := 0
	for k < len(st.pending) && now.Sub(st.pending[k].sent) >= timeout {
		k++
	}
	var expired []*fwdReq
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
		for _, c := range r.calls {
			c.answer(nil, err)
		}
		f.freeReq(r)
		f.settle()
	}
	if stalled {
		f.teardown(st, true)
	}
}

// teardown ends st: nothing more is written on it, and its receiver
// answers the requests in flight.
func (f *forwarder) teardown(st *fwdStream, stalled bool) {
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
func (f *forwarder) receive(st *fwdStream) {
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
		if bad := f.deliver(r, &resp); bad != nil {
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
		err = fmt.Errorf("peer %s: no answer within %v: %w", f.dest, f.n.cfg.ForwardTimeout, context.DeadlineExceeded)
	case f.n.ctx.Err() != nil:
		err = ErrClosed
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
			for _, c := range r.calls {
				c.answer(nil, err)
			}
			f.freeReq(r)
			f.settle()
		}
	}
}

// take removes the request with id from the ones in flight (f.mu held).
func (st *fwdStream) take(id uint64) *fwdReq {
	for i, r := range st.pending {
		if r.id == id {
			st.pending = slices.Delete(st.pending, i, i+1)
			return r
		}
	}
	return nil
}

// deliver answers r's calls from resp. A malformed answer (the wrong
// number of results) fails them and is returned: the stream is then
// dropped, as the peer does not speak the protocol.
func (f *forwarder) deliver(r *fwdReq, resp *weirv1.CheckStreamResponse) error {
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
	}
	got := resp.GetResults()
	for _, c := range r.calls {
		if err != nil {
			c.answer(nil, err)
			continue
		}
		k := len(c.items)
		c.answer(got[:k], nil)
		got = got[k:]
	}
	f.freeReq(r)
	f.settle()
	return bad
}

// unary sends a request as a unary Forward RPC (the peer lacks
// ForwardStream) on a goroutine of its own, which answers the calls.
func (f *forwarder) unary(batch []*fwdCall) {
	calls := slices.Clone(batch)
	var w wireItems // not the writer's: this may run on the receiver
	req := &weirv1.CheckRequest{Items: w.set(calls)}
	f.n.goFunc(func() {
		got, err := f.forwardUnary(req)
		for _, c := range calls {
			if err != nil {
				c.answer(nil, err)
				continue
			}
			k := len(c.items)
			c.answer(got[:k], nil)
			got = got[k:]
		}
		f.settle()
	})
}

// forwardUnary decides req's items at the peer with one unary Forward RPC
// within ForwardTimeout.
func (f *forwarder) forwardUnary(req *weirv1.CheckRequest) ([]*weirv1.CheckResult, error) {
	cc, err := f.n.peerConn(f.dest)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(f.n.ctx, f.n.cfg.ForwardTimeout)
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

// wireItems is the writer's request buffer, reused from one request to
// the next (grpc-go has encoded a message when Send returns).
type wireItems struct {
	block []weirv1.CheckItem
	ptrs  []*weirv1.CheckItem
	// groups maps the current call's group ids to the batch's: the
	// owner decides the whole batch as one Check, where a group id means
	// all-or-nothing, so two callers' groups must not share an id.
	groups [][2]uint32
	gmap   map[uint32]uint32 // instead of groups once a call has many
}

// group returns the batch's id for the current call's group g, taking the
// next one the first time g is seen.
func (w *wireItems) group(g uint32, next *uint32) uint32 {
	if w.gmap != nil {
		if id, ok := w.gmap[g]; ok {
			return id
		}
		*next++
		w.gmap[g] = *next
		return *next
	}
	for _, p := range w.groups {
		if p[0] == g {
			return p[1]
		}
	}
	*next++
	w.groups = append(w.groups, [2]uint32{g, *next})
	if len(w.groups) > 8 { // many groups in one call: a map from here on
		w.gmap = make(map[uint32]uint32, 2*len(w.groups))
		for _, p := range w.groups {
			w.gmap[p[0]] = p[1]
		}
	}
	return *next
}

// set fills the buffer with the batch's items, in order, and returns them.
func (w *wireItems) set(batch []*fwdCall) []*weirv1.CheckItem {
	n := 0
	for _, c := range batch {
		n += len(c.items)
	}
	if cap(w.block) < n {
		w.block = make([]weirv1.CheckItem, n)
		w.ptrs = make([]*weirv1.CheckItem, n)
	}
	w.block, w.ptrs = w.block[:n], w.ptrs[:n]
	k := 0
	var next uint32 // the batch's group ids, renumbered per call
	for _, c := range batch {
		w.groups, w.gmap = w.groups[:0], nil
		for i := range c.items {
			limitpb.ItemToProto(&w.block[k], &c.items[i])
			if g := c.items[i].Group; g != 0 {
				w.block[k].Group = w.group(g, &next)
			}
			w.ptrs[k] = &w.block[k]
			k++
		}
	}
	return w.ptrs
}
