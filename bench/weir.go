package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/ring"
)

// WeirOptions tune the weir target's per-node coalescing sender.
type WeirOptions struct {
	// Inflight is the number of Check RPCs one gateway keeps in flight to
	// one node. While all are busy, checks queue and leave together.
	Inflight int
	// MaxBatch caps the items in one RPC.
	MaxBatch int
	// Queue is the per-node queue length (callers block when it is full).
	Queue int
	// RPCTimeout bounds one Check RPC.
	RPCTimeout time.Duration
	// Refresh is how often the member list (and so the ring) is re-read.
	Refresh time.Duration
}

// DefaultWeirOptions returns the sender settings the bench uses.
func DefaultWeirOptions() WeirOptions {
	return WeirOptions{Inflight: 2, MaxBatch: 1024, Queue: 8192, RPCTimeout: 2 * time.Second, Refresh: 250 * time.Millisecond}
}

// view is one immutable routing snapshot: the ring and each member's gRPC
// address.
type view struct {
	ring  *ring.Ring
	addrs map[string]string
}

// WeirCluster routes checks to a Weir cluster. It keeps the ring view
// (refreshed from Cluster.Members) shared by the gateways it makes; each
// gateway has its own connections and senders.
type WeirCluster struct {
	seeds []string
	opts  WeirOptions
	view  atomic.Pointer[view]

	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex // guards conn
	conn *grpc.ClientConn
}

// NewWeirCluster reads the member list from the first seed (gRPC address)
// that answers and keeps it fresh until Close.
func NewWeirCluster(ctx context.Context, seeds []string, opts WeirOptions) (*WeirCluster, error) {
	if len(seeds) == 0 {
		return nil, fmt.Errorf("%w: no cluster addresses", ErrInput)
	}
	c := &WeirCluster{seeds: seeds, opts: opts, stop: make(chan struct{})}
	if err := c.refresh(ctx); err != nil {
		c.closeConn()
		return nil, err
	}
	c.wg.Add(1)
	go c.refresher()
	return c, nil
}

func (c *WeirCluster) refresher() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.Refresh)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = c.refresh(ctx) // keep the last good view
			cancel()
		}
	}
}

// refresh asks the members known so far (then the seeds) for the member
// list and swaps in a new view.
func (c *WeirCluster) refresh(ctx context.Context) error {
	var cands []string
	if v := c.view.Load(); v != nil {
		for _, a := range v.addrs {
			cands = append(cands, a)
		}
	}
	cands = append(cands, c.seeds...)
	var last error
	for _, addr := range cands {
		resp, err := c.members(ctx, addr)
		if err != nil {
			last = err
			continue
		}
		v, err := newView(resp)
		if err != nil {
			last = err
			continue
		}
		c.view.Store(v)
		return nil
	}
	return fmt.Errorf("bench: reading cluster members: %w", last)
}

func (c *WeirCluster) members(ctx context.Context, addr string) (*weirv1.MembersResponse, error) {
	c.mu.Lock()
	if c.conn == nil || c.conn.Target() != addr {
		if c.conn != nil {
			_ = c.conn.Close()
		}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		c.conn = cc
	}
	cc := c.conn
	c.mu.Unlock()
	return weirv1.NewClusterClient(cc).Members(ctx, &weirv1.MembersRequest{})
}

func newView(resp *weirv1.MembersResponse) (*view, error) {
	v := &view{addrs: map[string]string{}}
	var ids []string
	for _, m := range resp.GetMembers() {
		if m.GetState() != "alive" && m.GetState() != "suspect" {
			continue
		}
		ids = append(ids, m.GetId())
		v.addrs[m.GetId()] = m.GetGrpcAddr()
	}
	r, err := ring.New(ids, ring.Config{
		PartitionCount:    int(resp.GetPartitionCount()),
		ReplicationFactor: int(resp.GetReplicationFactor()),
		Load:              resp.GetLoad(),
		Replicas:          2,
	})
	if err != nil {
		return nil, err
	}
	v.ring = r
	return v, nil
}

// Members returns the current member ids and their gRPC addresses.
func (c *WeirCluster) Members() map[string]string {
	v := c.view.Load()
	out := make(map[string]string, len(v.addrs))
	for id, a := range v.addrs {
		out[id] = a
	}
	return out
}

// Owner returns the id of the member that owns key in the current view.
func (c *WeirCluster) Owner(key string) string { return c.view.Load().ring.Owner(key) }

// Factory returns a Factory of independent gateways over this cluster.
func (c *WeirCluster) Factory() Factory {
	return func(int) (Target, error) {
		return &weirGateway{c: c, senders: map[string]*sender{}}, nil
	}
}

func (c *WeirCluster) closeConn() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// Close stops the member refresher. Gateways are closed by their users.
func (c *WeirCluster) Close() error {
	close(c.stop)
	c.wg.Wait()
	c.closeConn()
	return nil
}

// weirGateway is one simulated gateway: one sender per node.
type weirGateway struct {
	c       *WeirCluster
	mu      sync.RWMutex
	senders map[string]*sender // by gRPC address
	closed  bool
}

var (
	_ Target       = (*weirGateway)(nil)
	_ GroupChecker = (*weirGateway)(nil)
)

func (g *weirGateway) sender(addr string) (*sender, error) {
	g.mu.RLock()
	s, ok := g.senders[addr]
	closed := g.closed
	g.mu.RUnlock()
	if ok {
		return s, nil
	}
	if closed {
		return nil, ErrClosed
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.senders[addr]; ok {
		return s, nil
	}
	s, err := newSender(addr, g.c.opts)
	if err != nil {
		return nil, err
	}
	g.senders[addr] = s
	return s, nil
}

func (g *weirGateway) Check(ctx context.Context, key, rule string, cost int64) (bool, error) {
	return g.check(ctx, key, []string{rule}, cost)
}

func (g *weirGateway) CheckGroup(ctx context.Context, key string, rules []string, cost int64) (bool, error) {
	return g.check(ctx, key, rules, cost)
}

func (g *weirGateway) check(ctx context.Context, key string, rules []string, cost int64) (bool, error) {
	v := g.c.view.Load()
	s, err := g.sender(v.addrs[v.ring.Owner(key)])
	if err != nil {
		return false, err
	}
	return s.do(ctx, key, rules, cost)
}

func (g *weirGateway) Close() error {
	g.mu.Lock()
	g.closed = true
	ss := g.senders
	g.senders = map[string]*sender{}
	g.mu.Unlock()
	for _, s := range ss {
		s.close()
	}
	return nil
}

// call is one queued check and where its answer goes.
type call struct {
	key   string
	rules []string
	cost  int64
	done  chan answer // buffered 1
}

type answer struct {
	allowed bool
	err     error
}

// sender is one gateway's coalescing link to one node. Its loop takes an
// in-flight slot, waits for the first queued call, drains whatever else is
// queued (up to MaxBatch items) and sends it all as one Check RPC. So a
// batch leaves as soon as the link has room: no timer, no fixed wait.
type sender struct {
	conn   *grpc.ClientConn
	client weirv1.LimiterClient
	opts   WeirOptions
	q      chan *call
	slots  chan struct{}
	stop   chan struct{}
	loop   sync.WaitGroup
	rpcs   sync.WaitGroup
	pool   sync.Pool // *call
}

func newSender(addr string, o WeirOptions) (*sender, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("bench: dial %s: %w", addr, err)
	}
	s := &sender{
		conn: cc, client: weirv1.NewLimiterClient(cc), opts: o,
		q: make(chan *call, o.Queue), slots: make(chan struct{}, o.Inflight), stop: make(chan struct{}),
	}
	s.pool.New = func() any { return &call{done: make(chan answer, 1)} }
	s.loop.Add(1)
	go s.run()
	return s, nil
}

func (s *sender) do(ctx context.Context, key string, rules []string, cost int64) (bool, error) {
	c := s.pool.Get().(*call)
	c.key, c.rules, c.cost = key, rules, cost
	select {
	case s.q <- c:
	case <-ctx.Done():
		s.pool.Put(c)
		return false, ctx.Err()
	case <-s.stop:
		return false, ErrClosed
	}
	select {
	case a := <-c.done:
		s.pool.Put(c)
		return a.allowed, a.err
	case <-ctx.Done():
		return false, ctx.Err() // c is abandoned: its answer lands in the buffer
	}
}

func (s *sender) run() {
	defer s.loop.Done()
	batch := make([]*call, 0, 64)
	for {
		select {
		case s.slots <- struct{}{}:
		case <-s.stop:
			return
		}
		var first *call
		select {
		case first = <-s.q:
		case <-s.stop:
			return
		}
		batch = append(batch[:0], first)
		n := len(first.rules)
	drain:
		for n < s.opts.MaxBatch {
			select {
			case c := <-s.q:
				batch = append(batch, c)
				n += len(c.rules)
			default:
				break drain
			}
		}
		out := make([]*call, len(batch))
		copy(out, batch)
		s.rpcs.Add(1)
		go s.send(out, n)
	}
}

func (s *sender) send(calls []*call, n int) {
	defer s.rpcs.Done()
	defer func() { <-s.slots }()
	items := make([]weirv1.CheckItem, n)
	req := &weirv1.CheckRequest{Items: make([]*weirv1.CheckItem, 0, n)}
	i := 0
	for ci, c := range calls {
		var group uint32
		if len(c.rules) > 1 {
			group = uint32(ci + 1)
		}
		for _, r := range c.rules {
			it := &items[i]
			it.Key, it.Rule, it.Cost, it.Group = c.key, r, c.cost, group
			req.Items = append(req.Items, it)
			i++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.RPCTimeout)
	resp, err := s.client.Check(ctx, req)
	cancel()
	if err == nil && len(resp.GetResults()) != n {
		err = fmt.Errorf("%w: %d results for %d items", ErrUndecided, len(resp.GetResults()), n)
	}
	if err != nil {
		for _, c := range calls {
			c.done <- answer{err: err}
		}
		return
	}
	res := resp.GetResults()
	i = 0
	for _, c := range calls {
		a := answer{allowed: true}
		for range c.rules {
			r := res[i]
			i++
			if r.GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
				a = answer{err: fmt.Errorf("%w: %s: %s", ErrUndecided, r.GetErrorCode(), r.GetError())}
			} else if a.err == nil && !r.GetAllowed() {
				a.allowed = false
			}
		}
		c.done <- a
	}
}

func (s *sender) close() {
	close(s.stop)
	s.loop.Wait()
	s.rpcs.Wait()
	_ = s.conn.Close()
}
