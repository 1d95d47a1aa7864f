package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirlimit/weir/internal/checkstream"
	"github.com/weirlimit/weir/internal/grpcwin"
	"github.com/weirlimit/weir/proto/weirv1"
)

// Errors a check can fail with before or while reaching its node.
var (
	errBreakerOpen = errors.New("client: circuit breaker open")
	errQueueFull   = errors.New("client: node queue full")
)

// call is one Decide's items bound for one node. done has room for one
// answer so the sender never blocks on a caller that gave up. Calls are
// pooled (Client.newCall): the first items live in vals, so a decision
// does not allocate them.
type call struct {
	items    []*weirv1.CheckItem
	deadline time.Time     // when the caller gives up
	timeout  time.Duration // the caller's whole wait, from enqueue
	done     chan callResult
	ptrs     [4]*weirv1.CheckItem
	vals     [4]weirv1.CheckItem
}

// add appends a check item, in vals while there is room.
func (cl *call) add(key, rule string, cost int64, group uint32, version, leaseGateway uint64) {
	j := len(cl.items)
	if j >= len(cl.vals) {
		cl.items = append(cl.items, &weirv1.CheckItem{Key: key, Rule: rule, Cost: cost, Group: group, RuleVersion: version, LeaseGateway: leaseGateway})
		return
	}
	v := &cl.vals[j]
	v.Reset()
	v.Key, v.Rule, v.Cost, v.Group, v.RuleVersion, v.LeaseGateway = key, rule, cost, group, version, leaseGateway
	cl.items = append(cl.items, v)
}

type callResult struct {
	res []*weirv1.CheckResult
	err error
}

// nodeConn is the client's link to one node: a gRPC connection, a bounded
// queue of calls drained by InFlight sender goroutines into coalesced
// batches, and a circuit breaker. There are InFlight senders, each a
// CheckStream of its own (internal/checkstream; unary Check RPCs to a node
// that does not serve CheckStream): a sender goroutine takes one to send a
// batch, and so does a caller that finds the queue empty and a sender free
// (direct), which then sends its own call on its own goroutine.
type nodeConn struct {
	addr    string
	cc      *grpc.ClientConn
	lc      weirv1.LimiterClient
	queue   chan *call
	senders chan *sender // InFlight of them; whoever holds one may send on it
	queued  atomic.Int32 // calls enqueued and not yet on their way (in the queue or waiting for a sender)
	c       *Client
	legacy  checkstream.Legacy // the node lacks CheckStream: unary Check for a while

	mu        sync.Mutex // guards the breaker fields
	failures  int        // counted failures in a row
	sent      uint64     // RPCs started
	failMark  uint64     // sent when the last failure was counted
	openUntil time.Time  // while open: no call before then
	open      bool
}

func newNodeConn(c *Client, addr string) (*nodeConn, error) {
	cc, err := c.dial(addr)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	n := &nodeConn{
		addr:    addr,
		cc:      cc,
		lc:      weirv1.NewLimiterClient(cc),
		queue:   make(chan *call, c.cfg.QueueSize),
		senders: make(chan *sender, c.cfg.InFlight),
		c:       c,
	}
	for range c.cfg.InFlight {
		n.senders <- &sender{cs: checkstream.NewStream("client: " + addr)}
	}
	return n, nil
}

// sender is one stream to a node, the buffers a batch is built in and
// its linger state.
type sender struct {
	cs    *checkstream.Stream
	batch []*call
	items []*weirv1.CheckItem
	lg    lingerState
}

// direct sends cl at once on the caller's goroutine when no call is queued
// and a sender is free, and returns its answer; ok is false otherwise
// (then enqueue it). A lone check so skips two goroutine hand-offs: to a
// sender goroutine, and its answer back. Its caller waits for the answer
// until cl's timeout (the stream's), whatever its context says.
func (n *nodeConn) direct(cl *call) (r callResult, ok bool) {
	if n.queued.Load() > 0 { // those calls go first, batched
		return r, false
	}
	var s *sender
	select {
	case s = <-n.senders:
	default:
		return r, false
	}
	s.batch = append(s.batch[:0], cl)
	n.sendOn(s)
	return <-cl.done, true // answered by sendOn, on this goroutine
}

// sendOn sends s.batch on s, answers its calls and gives s back.
func (n *nodeConn) sendOn(s *sender) {
	s.lg.prev = len(s.batch)
	s.items, s.lg.others = n.send(n.c.ctx, s.cs, s.batch, s.items[:0])
	clear(s.batch) // drop references to answered calls
	clear(s.items)
	n.senders <- s
}

// dial makes a (lazily connecting) gRPC client for addr, through
// Config.Dial when set.
func (c *Client) dial(addr string) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if c.cfg.TLS != nil {
		creds = credentials.NewTLS(c.cfg.TLS)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, grpcwin.DialOptions()...)
	if c.cfg.Dial != nil {
		opts = append(opts, grpc.WithContextDialer(c.cfg.Dial))
	}
	if c.cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(c.cfg.Token)))
	}
	return grpc.NewClient(addr, opts...)
}

// bearer sends the gateway token on every call (Config.Token). It is sent
// over plaintext too: a cluster without TLS has no other channel.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (b bearer) RequireTransportSecurity() bool { return false }

// allow reports whether a call may go to the node now: the breaker is
// closed, or its cooldown has passed. Then one call goes through as a probe
// and the next one waits another cooldown, so a probe that is lost (never
// sent, its answer dropped) delays the next probe but cannot wedge the
// breaker open.
func (n *nodeConn) allow(now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.open {
		return true
	}
	if now.Before(n.openUntil) {
		return false
	}
	n.openUntil = now.Add(n.c.cfg.BreakerCooldown)
	return true
}

// begin numbers a request (a stream message or an RPC) for record.
func (n *nodeConn) begin() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sent++
	return n.sent
}

// record feeds the outcome of RPC seq to the breaker. A success closes it.
// A failure counts only if the RPC was sent after the last counted one
// failed: RPCs in flight together that fail together (one stall of this
// process or of the node) count once, so BreakerFailures means that many
// attempts in a row, not that many concurrent RPCs.
func (n *nodeConn) record(seq uint64, ok bool, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ok {
		n.failures, n.open = 0, false
		return
	}
	if seq <= n.failMark {
		return
	}
	n.failMark = n.sent
	n.failures++
	if n.failures >= n.c.cfg.BreakerFailures {
		if !n.open {
			n.c.stats.breakerOpens.Add(1)
		}
		n.open = true
		n.openUntil = now.Add(n.c.cfg.BreakerCooldown)
	}
}

// breakerOpen reports whether the breaker is open (tests, status).
func (n *nodeConn) breakerOpen() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.open
}

// enqueue hands a call to the senders without blocking.
func (n *nodeConn) enqueue(cl *call) error {
	n.queued.Add(1)
	select {
	case n.queue <- cl:
		return nil
	default:
		n.queued.Add(-1)
		return errQueueFull
	}
}

// run is one of InFlight sender loops: take the first waiting call and a
// free sender, then whatever else queued meanwhile (up to MaxBatch items),
// and send it all as one request. No wait on a timer: under load, calls
// pile up while every sender is busy and leave together, and a sender
// expecting more callers back than have queued lets the runnable ones run
// first (linger). Long-lived
// loops (rather than a goroutine per RPC) keep their grown stacks.
func (n *nodeConn) run(ctx context.Context) {
	defer n.c.wg.Done()
	defer func() { // the streams end with ctx; drop one
		select {
		case s := <-n.senders:
			s.cs.Close()
		default:
		}
	}()
	for {
		var first *call
		select {
		case <-ctx.Done():
			n.failQueued()
			return
		case first = <-n.queue:
		}
		var s *sender
		select {
		case <-ctx.Done():
			n.queued.Add(-1)
			first.done <- callResult{err: ErrClosed}
			n.failQueued()
			return
		case s = <-n.senders:
		}
		s.batch = append(s.batch[:0], first)
		count := len(first.items)
		s.batch, count = n.drain(s.batch, count)
		// The callers the previous request answered are likely to ask
		// again, beside the calls that queued while it was out.
		if want := s.lg.prev + s.lg.others; want > len(s.batch) && n.c.cfg.Linger > 0 && count < n.c.cfg.MaxBatch {
			s.batch, count = n.linger(want, s.batch, count)
		}
		n.queued.Add(-int32(len(s.batch)))
		n.sendOn(s)
	}
}

// drain adds the calls queued now to batch, up to MaxBatch items in all
// (count: the items batch holds).
func (n *nodeConn) drain(batch []*call, count int) ([]*call, int) {
	for count < n.c.cfg.MaxBatch {
		select {
		case cl := <-n.queue:
			batch = append(batch, cl)
			count += len(cl.items)
		default:
			return batch, count
		}
	}
	return batch, count
}

// lingerState is what a sender remembers of its previous request to
// gather the next one.
type lingerState struct {
	prev   int // calls in the previous request: callers likely to come back
	others int // calls queued when its answer came: not those callers
}

// linger gathers the previous request's callers coming back, beside the
// calls that queued while it was out, for at most Linger in all. The
// callers a request answered were woken together and usually ask again
// at once: on a busy machine, the first of them would otherwise leave
// alone (or with the calls that queued meanwhile) and the rest wait a
// whole round trip for the next request. It decides by what is queued, not
// by waiting: it lets the runnable callers run (runtime.Gosched) and takes
// what they queued, and yields again only while a yield brought a call and
// want is not reached. There is no timer: in an idle Go process any timer
// under 1 ms fires after about 1.1 ms, so a timed wait of microseconds
// really waited a millisecond whenever a gateway was quiet. A lone caller
// (the previous request held one call, nothing else queued) never lingers.
func (n *nodeConn) linger(want int, batch []*call, count int) ([]*call, int) {
	start := time.Now()
	for {
		runtime.Gosched()
		before := len(batch)
		batch, count = n.drain(batch, count)
		if len(batch) >= want || count >= n.c.cfg.MaxBatch || len(batch) == before || time.Since(start) >= n.c.cfg.Linger {
			return batch, count
		}
	}
}

func (n *nodeConn) failQueued() {
	for {
		select {
		case cl := <-n.queue:
			n.queued.Add(-1)
			cl.done <- callResult{err: ErrClosed}
		default:
			return
		}
	}
}

// send sends batch as one request on cs (or one unary Check RPC) and
// answers every call in it. items is a buffer to build the request in;
// send returns it for reuse, and the calls queued when the answer came,
// before any caller in batch was answered (so none of theirs).
func (n *nodeConn) send(ctx context.Context, cs *checkstream.Stream, batch []*call, items []*weirv1.CheckItem) ([]*weirv1.CheckItem, int) {
	now := n.c.now()
	var timeout time.Duration
	live := batch[:0]
	for _, cl := range batch {
		if !cl.deadline.After(now) { // its caller already gave up
			cl.done <- callResult{err: context.DeadlineExceeded}
			continue
		}
		timeout = max(timeout, cl.timeout)
		items = append(items, cl.items...)
		live = append(live, cl)
	}
	if len(live) == 0 {
		return items, len(n.queue)
	}
	// The request gets the whole timeout from now, not what the callers
	// have left after queueing: the breaker judges the node by how fast it
	// answers, and time lost in this process's queue (a busy gateway) is
	// not the node's failure. A caller still gives up at its own deadline.
	n.c.stats.rpcs.Add(1)
	n.c.stats.batchedItems.Add(uint64(len(items)))
	seq := n.begin()
	var res []*weirv1.CheckResult
	var err error
	unary := n.legacy.Active()
	if !unary {
		res, err = cs.Do(ctx, nil, n.lc.CheckStream, items, timeout)
		unary = n.legacy.Saw(err) // an older node
	}
	if unary {
		res, err = n.checkUnary(ctx, items, timeout)
	}
	if err == nil && len(res) != len(items) {
		err = fmt.Errorf("client: %s answered %d results for %d items", n.addr, len(res), len(items))
	}
	n.record(seq, err == nil, n.c.now())
	if err != nil {
		n.c.stats.rpcErrors.Add(1)
		for _, cl := range live {
			cl.done <- callResult{err: err}
		}
		return items, 0
	}
	others := len(n.queue)
	for _, cl := range live {
		k := len(cl.items) // read before answering: the caller may reuse cl at once
		cl.done <- callResult{res: res[:k:k]}
		res = res[k:]
	}
	return items, others
}

// checkUnary sends items as one unary Check RPC.
func (n *nodeConn) checkUnary(ctx context.Context, items []*weirv1.CheckItem, timeout time.Duration) ([]*weirv1.CheckResult, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := n.lc.Check(rctx, &weirv1.CheckRequest{Items: items})
	return resp.GetResults(), err
}
