package node

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"

	"github.com/weirlimit/weir/internal/checkstream"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/limit/limitpb"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// peerPool keeps one gRPC connection per peer address.
type peerPool struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	opts  []grpc.DialOption // set once by New, before any dial (credentials included)
}

func newPeerPool() *peerPool { return &peerPool{conns: map[string]*grpc.ClientConn{}} }

func (p *peerPool) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return nil, ErrClosed
	}
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

func (p *peerPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
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
	v := n.view.Load()
	if v == nil {
		return nil, fmt.Errorf("%w: no view", errUnavailable)
	}
	addr, ok := v.addr(id)
	if !ok {
		return nil, fmt.Errorf("%w: unknown member %q", errUnavailable, id)
	}
	return n.peers.conn(addr)
}

// forwarder coalesces items bound for one peer into few requests.
// ForwardInflight senders each take a call, drain whatever else queued
// meanwhile (up to ForwardMaxBatch items) and send it all as one request:
// batches grow with load and there is no fixed wait at low load. The
// senders live as long as the node, so a request does not start a
// goroutine. Each sender sends its requests as messages on a ForwardStream
// of its own (much cheaper than a unary RPC each); a peer that answers
// Unimplemented (an older node) gets unary Forward RPCs for a while.
//
// The forwarder is a wire edge: callers queue domain items and get domain
// results; only the sender converts, one batch at a time (limitpb).
type forwarder struct {
	n       *Node
	dest    string
	ch      chan *fwdCall
	stopped chan struct{}      // closed when dest left the cluster (pruneForwarders)
	legacy  checkstream.Legacy // the peer lacks ForwardStream: unary Forward for a while
}

type fwdCall struct {
	items []limit.Item
	res   []limit.Result
	err   error
	done  chan struct{}
}

func (n *Node) forwarder(dest string) *forwarder {
	n.fwdMu.Lock()
	defer n.fwdMu.Unlock()
	if f, ok := n.fwd[dest]; ok {
		return f
	}
	f := &forwarder{
		n:       n,
		dest:    dest,
		ch:      make(chan *fwdCall, 4096),
		stopped: make(chan struct{}),
	}
	n.fwd[dest] = f
	for range n.cfg.ForwardInflight {
		n.goFunc(f.sender)
	}
	return f
}

// pruneForwarders stops the forwarders of destinations that are no longer
// live members (they left or died): their senders end and their queued
// calls fail. A member that comes back gets a new forwarder.
func (n *Node) pruneForwarders(live map[string]member) {
	n.fwdMu.Lock()
	defer n.fwdMu.Unlock()
	for dest, f := range n.fwd {
		if _, ok := live[dest]; !ok {
			close(f.stopped)
			delete(n.fwd, dest)
		}
	}
}

// forwarders is how many destinations have a forwarder.
func (n *Node) forwarders() int {
	n.fwdMu.Lock()
	defer n.fwdMu.Unlock()
	return len(n.fwd)
}

// closeForwarders fails calls still queued once the senders have stopped
// (after n.wg is joined).
func (n *Node) closeForwarders() {
	n.fwdMu.Lock()
	defer n.fwdMu.Unlock()
	for _, f := range n.fwd {
		f.failQueued()
	}
}

// start queues items for the peer (coalesced with other callers' items);
// wait returns their results, one per item.
func (f *forwarder) start(ctx context.Context, items []limit.Item) (*fwdCall, error) {
	c := &fwdCall{items: items, done: make(chan struct{})}
	select {
	case f.ch <- c:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-f.n.ctx.Done():
		return nil, ErrClosed
	case <-f.stopped:
		return nil, f.gone()
	}
}

func (f *forwarder) gone() error {
	return fmt.Errorf("%w: member %s left the cluster", errUnavailable, f.dest)
}

// wait returns the results of a call queued by start.
func (f *forwarder) wait(ctx context.Context, c *fwdCall) ([]limit.Result, error) {
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-f.n.ctx.Done():
		return nil, ErrClosed
	case <-f.stopped:
		// The member is gone: a call already answered keeps its answer,
		// any other fails rather than wait for senders that stopped.
		select {
		case <-c.done:
			return c.res, c.err
		default:
			return nil, f.gone()
		}
	}
}

// sender sends queued calls, one RPC per drained batch, until the node
// closes.
func (f *forwarder) sender() {
	max := f.n.cfg.ForwardMaxBatch
	var (
		batch []*fwdCall
		w     wireItems
		st    = checkstream.NewStream("peer " + f.dest)
	)
	defer st.Close()
	for {
		select {
		case <-f.n.ctx.Done():
			f.failQueued()
			return
		case <-f.stopped:
			f.failQueued()
			return
		case c := <-f.ch:
			batch = append(batch, c)
		}
		count := len(batch[0].items)
	drain:
		for count < max {
			select {
			case c := <-f.ch:
				batch = append(batch, c)
				count += len(c.items)
			default:
				break drain
			}
		}
		f.send(st, batch, &w)
		clear(batch)
		batch = batch[:0]
	}
}

// wireItems is a sender's request buffer, reused from one request to the
// next (a request is done with once its answer has come back).
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

func (f *forwarder) failQueued() {
	for {
		select {
		case c := <-f.ch:
			c.err = ErrClosed
			close(c.done)
		default:
			return
		}
	}
}

// send sends batch's items as one request on st and answers every call.
func (f *forwarder) send(st *checkstream.Stream, batch []*fwdCall, w *wireItems) {
	if f.n.tracer != nil {
		if span := f.n.traceForward(f.dest, batch); span != nil {
			defer span.End()
		}
	}
	items := w.set(batch)
	f.n.met.forwardBatch.Observe(float64(len(items)))
	f.n.met.forwarded.Add(float64(len(items)))
	var res []limit.Result
	got, err := f.forward(st, items)
	if err == nil {
		res = limitpb.ResultsFromProto(got)
	}
	off := 0
	for _, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.res = res[off : off+len(c.items)]
		}
		off += len(c.items)
		close(c.done)
	}
}

// forward decides items at the peer: on st, or by a unary Forward RPC if
// the peer lacks ForwardStream. Either way the request gets ForwardTimeout.
func (f *forwarder) forward(st *checkstream.Stream, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error) {
	cc, err := f.n.peerConn(f.dest)
	if err != nil {
		return nil, err
	}
	if !f.legacy.Active() {
		res, err := st.Do(f.n.ctx, cc, weirv1.NewPeerClient(cc).ForwardStream, items, f.n.cfg.ForwardTimeout)
		if !f.legacy.Saw(err) {
			return res, err
		}
	}
	ctx, cancel := context.WithTimeout(f.n.ctx, f.n.cfg.ForwardTimeout)
	defer cancel()
	resp, err := weirv1.NewPeerClient(cc).Forward(ctx, &weirv1.CheckRequest{Items: items})
	if err != nil {
		return nil, err
	}
	if len(resp.Results) != len(items) {
		return nil, fmt.Errorf("peer %s answered %d results for %d items", f.dest, len(resp.Results), len(items))
	}
	return resp.Results, nil
}
