package client

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/ring"
	"github.com/weirlimit/weir/rulesraft/rules"
	"github.com/weirlimit/weir/rulesraft/rules/rulespb"
)

// Client is a gateway's handle on a Weir cluster. It is safe for
// concurrent use; Close stops it.
type Client struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool

	rules    atomic.Pointer[ruleState]
	view     atomic.Pointer[memberView]
	gateways atomic.Uint32
	ready    chan struct{} // closed when the first rule set arrives
	readyOne sync.Once
	next     atomic.Uint32 // round-robin over Cluster before a view exists
	group    atomic.Uint32 // group ids for Decide

	connMu sync.Mutex
	conns  map[string]*nodeConn // by gRPC address

	calls  sync.Pool // *call, see newCall
	timers sync.Pool // *time.Timer, see timer

	local   localState
	stats   stats
	metrics *metrics
	logLim  logLimiter
	waitLog logLimiter // decisions made before the first rule set
}

// ruleState is one compiled rule set.
type ruleState struct {
	m       *rules.Matcher
	set     *rules.Set
	version uint64
	at      time.Time // when it arrived
}

// memberView is the cluster's member set as last seen, with its ring.
type memberView struct {
	ring  *ring.Ring
	addrs map[string]string // member id → gRPC address
}

// New starts a client: it opens the rule and member watches against
// cfg.Cluster and returns at once (see Ready / WaitReady; until a rule set
// is held, decisions follow cfg.UntilRules). ctx bounds nothing after New
// returns; Close stops the client.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Client{cfg: cfg, ready: make(chan struct{}), conns: map[string]*nodeConn{}}
	c.local.init()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	m, err := newMetrics(c, cfg.Registry)
	if err != nil {
		c.cancel()
		return nil, err
	}
	c.metrics = m
	c.wg.Add(3)
	go c.watchRules()
	go c.watchMembers()
	go c.leaseJanitor()
	return c, nil
}

// Close gives unspent lease tokens back (best effort, bounded by one
// second), stops every goroutine, waits for them and closes connections.
// It is idempotent.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.Background(), time.Second)
	c.refundLeases(rctx, true)
	cancel()
	c.cancel()
	c.wg.Wait()
	c.connMu.Lock()
	defer c.connMu.Unlock()
	for _, n := range c.conns {
		_ = n.cc.Close()
	}
	c.conns = nil
	if c.metrics != nil {
		c.metrics.unregister()
	}
	return nil
}

// Ready reports whether the client holds a rule set.
func (c *Client) Ready() bool { return c.rules.Load() != nil }

// WaitReady blocks until the first rule set arrives or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotReady, ctx.Err())
	}
}

// RulesVersion returns the version of the rule set in use (0 before the
// first one).
func (c *Client) RulesVersion() uint64 {
	if rs := c.rules.Load(); rs != nil {
		return rs.version
	}
	return 0
}

// Gateways returns the number of live gateways as last reported by the
// cluster (at least 1).
func (c *Client) Gateways() int { return max(1, int(c.gateways.Load())) }

func (c *Client) now() time.Time { return c.cfg.Now() }

// conn returns the connection to addr, creating it (and its sender) once.
func (c *Client) conn(addr string) (*nodeConn, error) {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	if c.conns == nil {
		return nil, ErrClosed
	}
	if n := c.conns[addr]; n != nil {
		return n, nil
	}
	n, err := newNodeConn(c, addr)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = n
	c.wg.Add(c.cfg.InFlight)
	for range c.cfg.InFlight {
		go n.run(c.ctx)
	}
	return n, nil
}

// route returns the gRPC address of the node that owns key, or a
// bootstrap address while no member view exists.
func (c *Client) route(key string) string {
	if v := c.view.Load(); v != nil && v.ring != nil && v.ring.Len() > 0 {
		if a := v.addrs[v.ring.Owner(key)]; a != "" {
			return a
		}
	}
	i := c.next.Add(1)
	return c.cfg.Cluster[int(i)%len(c.cfg.Cluster)]
}

// addrs lists where the watches may connect: the bootstrap addresses,
// then every known member.
func (c *Client) addrs() []string {
	out := append([]string(nil), c.cfg.Cluster...)
	if v := c.view.Load(); v != nil {
		for _, a := range v.addrs {
			out = append(out, a)
		}
	}
	return out
}

// stream runs one watch at a time against successive addresses until the
// client closes, backing off between failed attempts (50ms doubling to 2s,
// reset once an attempt delivered something).
func (c *Client) stream(what string, attempt func(ctx context.Context, cc *grpc.ClientConn) (progressed bool, err error)) {
	backoff := 50 * time.Millisecond
	for i := 0; c.ctx.Err() == nil; i++ {
		as := c.addrs()
		addr := as[i%len(as)]
		cc, err := c.dial(addr)
		progressed := false
		if err == nil {
			progressed, err = attempt(c.ctx, cc)
			_ = cc.Close()
		}
		if c.ctx.Err() != nil {
			return
		}
		if progressed {
			backoff = 50 * time.Millisecond
		}
		c.cfg.Logger.Debug("weir client: watch ended; reconnecting", "watch", what, "addr", addr, "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// watchRules keeps a Rules.Watch open, resuming from the last version.
func (c *Client) watchRules() {
	defer c.wg.Done()
	c.stream("rules", func(ctx context.Context, cc *grpc.ClientConn) (bool, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := weirv1.NewRulesClient(cc).Watch(ctx, &weirv1.WatchRequest{FromVersion: c.RulesVersion(), GatewayId: c.cfg.GatewayID})
		if err != nil {
			return false, err
		}
		progressed := false
		for {
			ev, err := st.Recv()
			if err != nil {
				return progressed, err
			}
			progressed = true
			if g := ev.GetGateways(); g > 0 {
				c.gateways.Store(g)
			}
			if ev.GetFull() == nil {
				continue
			}
			c.applyRuleSet(ev.GetFull())
		}
	})
}

// applyRuleSet compiles and installs a rule set from the cluster. A set
// that does not compile (a newer server's rule this client cannot read) is
// logged and skipped; the previous one stays in use.
func (c *Client) applyRuleSet(p *weirv1.RuleSet) {
	set, err := rulespb.SetFromProto(p)
	if err != nil {
		c.cfg.Logger.Error("weir client: unreadable rule set; keeping the previous one", "version", p.GetVersion(), "err", err)
		return
	}
	m, err := rules.Compile(set.Rules)
	if err != nil {
		c.cfg.Logger.Error("weir client: rule set does not compile; keeping the previous one", "version", set.Version, "err", err)
		return
	}
	if cur := c.rules.Load(); cur != nil && cur.version > set.Version {
		return
	}
	c.rules.Store(&ruleState{m: m, set: set, version: set.Version, at: c.now()})
	c.readyOne.Do(func() { close(c.ready) })
}

// watchMembers keeps a Cluster.WatchMembers stream open and rebuilds the
// ring on every change.
func (c *Client) watchMembers() {
	defer c.wg.Done()
	c.stream("members", func(ctx context.Context, cc *grpc.ClientConn) (bool, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := weirv1.NewClusterClient(cc).WatchMembers(ctx, &weirv1.MembersRequest{})
		if err != nil {
			return false, err
		}
		progressed := false
		for {
			m, err := st.Recv()
			if err != nil {
				return progressed, err
			}
			progressed = true
			c.applyMembers(m)
		}
	})
}

func (c *Client) applyMembers(m *weirv1.MembersResponse) {
	if g := m.GetGateways(); g > 0 {
		c.gateways.Store(g)
	}
	ids := make([]string, 0, len(m.GetMembers()))
	addrs := make(map[string]string, len(m.GetMembers()))
	for _, mem := range m.GetMembers() {
		if mem.GetId() == "" || mem.GetGrpcAddr() == "" {
			continue
		}
		if st := mem.GetState(); st != "" && st != "alive" && st != "suspect" {
			continue // leaving, dead or left: not in the nodes' ring
		}
		ids = append(ids, mem.GetId())
		addrs[mem.GetId()] = mem.GetGrpcAddr()
	}
	if len(ids) == 0 {
		return
	}
	r, err := ring.New(ids, ring.Config{
		PartitionCount:    int(m.GetPartitionCount()),
		ReplicationFactor: int(m.GetReplicationFactor()),
		Load:              m.GetLoad(),
		Replicas:          ring.DefaultReplicas,
	})
	if err != nil {
		c.cfg.Logger.Error("weir client: cannot build ring from members", "err", err)
		return
	}
	c.view.Store(&memberView{ring: r, addrs: addrs})
	// Dial members now so the first check does not pay for the handshake.
	for _, a := range addrs {
		if nc, err := c.conn(a); err == nil {
			nc.cc.Connect()
		}
	}
}
