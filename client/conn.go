package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirlimit/weir/proto/weirv1"
)

// Errors a check can fail with before or while reaching its node.
var (
	errBreakerOpen = errors.New("client: circuit breaker open")
	errQueueFull   = errors.New("client: node queue full")
)

// call is one Decide's items bound for one node. done has room for one
// answer so the sender never blocks on a caller that gave up.
type call struct {
	items    []*weirv1.CheckItem
	deadline time.Time
	done     chan callResult
}

type callResult struct {
	res []*weirv1.CheckResult
	err error
}

// nodeConn is the client's link to one node: a gRPC connection, a bounded
// queue of calls drained by one sender goroutine into coalesced Check RPCs
// (at most cap(slots) in flight), and a circuit breaker.
type nodeConn struct {
	addr  string
	cc    *grpc.ClientConn
	lc    weirv1.LimiterClient
	queue chan *call
	slots chan struct{}
	c     *Client

	mu        sync.Mutex // guards the breaker fields
	failures  int
	openUntil time.Time
	open      bool
	probing   bool
}

func newNodeConn(c *Client, addr string) (*nodeConn, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	return &nodeConn{
		addr:  addr,
		cc:    cc,
		lc:    weirv1.NewLimiterClient(cc),
		queue: make(chan *call, c.cfg.QueueSize),
		slots: make(chan struct{}, c.cfg.InFlight),
		c:     c,
	}, nil
}

// allow reports whether a call may go to the node now: the breaker is
// closed, or its cooldown has passed and no other probe is out.
func (n *nodeConn) allow(now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.open {
		return true
	}
	if now.Before(n.openUntil) || n.probing {
		return false
	}
	n.probing = true
	return true
}

// record feeds an RPC outcome to the breaker.
func (n *nodeConn) record(ok bool, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.probing = false
	if ok {
		n.failures, n.open = 0, false
		return
	}
	n.failures++
	if n.failures >= n.c.cfg.BreakerFailures {
		if !n.open {
			n.c.stats.breakerOpens.Add(1)
		}
		n.open = true
		n.openUntil = now.Add(n.c.cfg.BreakerCooldown)
	}
}

// BreakerOpen reports whether the breaker is open (tests, status).
func (n *nodeConn) breakerOpen() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.open
}

// enqueue hands a call to the sender without blocking.
func (n *nodeConn) enqueue(cl *call) error {
	select {
	case n.queue <- cl:
		return nil
	default:
		return errQueueFull
	}
}

// run is the sender loop: take the first waiting call, wait for a free
// in-flight slot, then take whatever else queued meanwhile (up to MaxBatch
// items) and send it all as one RPC. No fixed wait: under load, calls pile
// up while the slots are busy and leave together.
func (n *nodeConn) run(ctx context.Context) {
	defer n.c.wg.Done()
	for {
		var first *call
		select {
		case <-ctx.Done():
			n.failQueued()
			return
		case first = <-n.queue:
		}
		select {
		case n.slots <- struct{}{}:
		case <-ctx.Done():
			first.done <- callResult{err: ErrClosed}
			n.failQueued()
			return
		}
		batch := []*call{first}
		count := len(first.items)
	drain:
		for count < n.c.cfg.MaxBatch {
			select {
			case cl := <-n.queue:
				batch = append(batch, cl)
				count += len(cl.items)
			default:
				break drain
			}
		}
		n.c.wg.Add(1)
		go n.send(ctx, batch, count)
	}
}

func (n *nodeConn) failQueued() {
	for {
		select {
		case cl := <-n.queue:
			cl.done <- callResult{err: ErrClosed}
		default:
			return
		}
	}
}

// send makes one Check RPC for batch and answers every call in it.
func (n *nodeConn) send(ctx context.Context, batch []*call, count int) {
	defer n.c.wg.Done()
	defer func() { <-n.slots }()
	now := n.c.now()
	var deadline time.Time
	items := make([]*weirv1.CheckItem, 0, count)
	live := batch[:0:0]
	for _, cl := range batch {
		if !cl.deadline.After(now) { // its caller already gave up
			cl.done <- callResult{err: context.DeadlineExceeded}
			continue
		}
		if cl.deadline.After(deadline) {
			deadline = cl.deadline
		}
		items = append(items, cl.items...)
		live = append(live, cl)
	}
	if len(live) == 0 {
		return
	}
	// The caller's clock (Config.Now) may be fake in tests; the RPC
	// deadline is real time, so use the timeout, not the instant.
	rctx, cancel := context.WithTimeout(ctx, deadline.Sub(now))
	defer cancel()
	n.c.stats.rpcs.Add(1)
	n.c.stats.batchedItems.Add(uint64(len(items)))
	resp, err := n.lc.Check(rctx, &weirv1.CheckRequest{Items: items})
	if err == nil && len(resp.GetResults()) != len(items) {
		err = fmt.Errorf("client: %s answered %d results for %d items", n.addr, len(resp.GetResults()), len(items))
	}
	n.record(err == nil, n.c.now())
	if err != nil {
		n.c.stats.rpcErrors.Add(1)
		for _, cl := range live {
			cl.done <- callResult{err: err}
		}
		return
	}
	res := resp.GetResults()
	for _, cl := range live {
		cl.done <- callResult{res: res[:len(cl.items):len(cl.items)]}
		res = res[len(cl.items):]
	}
}
