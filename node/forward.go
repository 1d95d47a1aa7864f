package node

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// peerPool keeps one gRPC connection per peer address.
type peerPool struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
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
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
	v := n.view.Load()
	if v == nil {
		return nil, fmt.Errorf("%w: no view", errUnavailable)
	}
	addr, ok := v.addr(id)
	if !ok {
		return nil, fmt.Errorf("%w: unknown member %q", errUnavailable, id)
	}
	c, err := n.peers.conn(addr)
	if err != nil {
		return nil, err
	}
	return weirv1.NewPeerClient(c), nil
}

// forwarder coalesces items bound for one peer into few Forward RPCs. Its
// loop takes a call, waits for a free in-flight slot, then drains whatever
// else queued meanwhile (up to ForwardMaxBatch items) and sends it all in
// one RPC: batches grow with load and there is no fixed wait at low load.
type forwarder struct {
	n    *Node
	dest string
	ch   chan *fwdCall
	sem  chan struct{}
	wg   sync.WaitGroup
}

type fwdCall struct {
	items []*weirv1.CheckItem
	res   []*weirv1.CheckResult
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
		n:    n,
		dest: dest,
		ch:   make(chan *fwdCall, 4096),
		sem:  make(chan struct{}, n.cfg.ForwardInflight),
	}
	n.fwd[dest] = f
	n.goFunc(f.loop)
	return f
}

func (n *Node) closeForwarders() {
	n.fwdMu.Lock()
	defer n.fwdMu.Unlock()
	for _, f := range n.fwd {
		f.wg.Wait()
	}
}

// do sends items to the peer (coalesced with other callers) and returns one
// result per item.
func (f *forwarder) do(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error) {
	c := &fwdCall{items: items, done: make(chan struct{})}
	select {
	case f.ch <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-f.n.ctx.Done():
		return nil, ErrClosed
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *forwarder) loop() {
	max := f.n.cfg.ForwardMaxBatch
	for {
		var first *fwdCall
		select {
		case <-f.n.ctx.Done():
			f.failQueued()
			return
		case first = <-f.ch:
		}
		select {
		case f.sem <- struct{}{}:
		case <-f.n.ctx.Done():
			first.err = ErrClosed
			close(first.done)
			f.failQueued()
			return
		}
		batch := []*fwdCall{first}
		count := len(first.items)
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
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer func() { <-f.sem }()
			f.send(batch, count)
		}()
	}
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

func (f *forwarder) send(batch []*fwdCall, count int) {
	items := make([]*weirv1.CheckItem, 0, count)
	for _, c := range batch {
		items = append(items, c.items...)
	}
	f.n.met.forwardBatch.Observe(float64(count))
	f.n.met.forwarded.Add(float64(count))
	resp, err := f.rpc(items)
	off := 0
	for _, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.res = resp.Results[off : off+len(c.items)]
		}
		off += len(c.items)
		close(c.done)
	}
}

func (f *forwarder) rpc(items []*weirv1.CheckItem) (*weirv1.CheckResponse, error) {
	cl, err := f.n.peerClient(f.dest)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(f.n.ctx, f.n.cfg.ForwardTimeout)
	defer cancel()
	resp, err := cl.Forward(ctx, &weirv1.CheckRequest{Items: items})
	if err != nil {
		return nil, err
	}
	if len(resp.Results) != len(items) {
		return nil, fmt.Errorf("peer %s answered %d results for %d items", f.dest, len(resp.Results), len(items))
	}
	return resp, nil
}
