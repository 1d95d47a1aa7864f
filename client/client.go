package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/ring"
	"github.com/weirlimit/weir/rulesraft/rules"
	"github.com/weirlimit/weir/rulesraft/rules/rulespb"
)

// Client is a gateway's handle on a Weir cluster. It is safe for
// concurrent use; Close stops it.
type Client struct {
	cfg    Config
	tracer trace.Tracer // nil: tracing off (Config.Tracer)
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	// noRefunds: a node refused a lease refund (a cluster with TLS takes
	// refunds from nodes only), so unspent lease tokens come back by
	// refill instead, and no more refunds are sent.
	noRefunds atomic.Bool

	rules    atomic.Pointer[ruleState]
	view     atomic.Pointer[memberView]
	gateways atomic.Uint32
	ready    chan struct{} // closed when the first rule set arrives (or is loaded from the cache)
	readyOne sync.Once
	rulesErr atomic.Pointer[error] // why the rules watch failed; nil once the cluster sent a set
	next     atomic.Uint32         // round-robin over Cluster before a view exists
	group    atomic.Uint32         // group ids for Decide
	// gatewayHash names this gateway to owners that lease hot keys
	// automatically (CheckItem.lease_gateway): xxhash64 of GatewayID,
	// never 0.
	gatewayHash uint64

	// saved is the set RulesCache holds (loaded by New, then written by
	// watchRules): only New and then the rules watch goroutine touch it.
	saved *weirv1.RuleSet

	connMu sync.Mutex
	conns  map[string]*nodeConn // by gRPC address

	calls  sync.Pool // *call, see newCall
	timers sync.Pool // *time.Timer, see timer

	local   localState
	report  reporter // gateway-side decisions, sent to a node every ReportInterval (report.go)
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
	cached  bool      // loaded from Config.RulesCache; the cluster has sent no set since
}

// memberView is the cluster's member set as last seen, with its ring.
type memberView struct {
	ring  *ring.Ring
	addrs map[string]string // member id → gRPC address
}

// New starts a client: it loads cfg.RulesCache (if any), opens the rule
// and member watches against cfg.Cluster and returns at once (see Ready /
// WaitReady; until a rule set is held, decisions follow cfg.UntilRules).
// ctx bounds nothing after New returns; Close stops the client.
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
	c.gatewayHash = max(1, xxhash.Sum64String(cfg.GatewayID))
	if cfg.Tracer != nil {
		c.tracer = cfg.Tracer.Tracer(tracing.Name)
	}
	c.local.init()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	m, err := newMetrics(c, cfg.Registry)
	if err != nil {
		c.cancel()
		return nil, err
	}
	c.metrics = m
	if cfg.RulesCache != "" {
		c.loadRulesCache()
	}
	c.wg.Add(3)
	go c.watchRules()
	go c.watchMembers()
	go c.leaseJanitor()
	if cfg.ReportInterval > 0 {
		c.wg.Add(1)
		go c.reportLoop()
	}
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

// Ready reports whether the client holds a rule set, from the cluster or
// from the rules cache.
func (c *Client) Ready() bool { return c.rules.Load() != nil }

// WaitReady blocks until the client holds a rule set (from the cluster or
// the rules cache) or ctx ends. Its error then wraps ErrNotReady,
// ctx.Err() and, when the rules watch has failed, why
// (RulesStatus().Err: a refused connection, a certificate, ...).
func (c *Client) WaitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		if err := c.RulesStatus().Err; err != nil {
			return fmt.Errorf("%w: %w; the rules watch failed: %w", ErrNotReady, ctx.Err(), err)
		}
		return fmt.Errorf("%w: %w", ErrNotReady, ctx.Err())
	}
}

// RulesVersion returns the version of the rule set in use (0 before the
// first one), from the cluster or the rules cache.
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
		// Resume from the last set the cluster sent; holding none (or only
		// the cache's), ask for the full set so that the cluster's answer
		// is compared with the cache's even at an equal or lower version.
		var from uint64
		if rs := c.rules.Load(); rs != nil && !rs.cached {
			from = rs.version
		}
		st, err := weirv1.NewRulesClient(cc).Watch(ctx, &weirv1.WatchRequest{FromVersion: from, GatewayId: c.cfg.GatewayID})
		if err != nil {
			c.watchFailed(err)
			return false, err
		}
		progressed := false
		for {
			ev, err := st.Recv()
			if err != nil {
				c.watchFailed(err)
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

// watchFailed records why the rules watch failed while no set has come
// from the cluster (RulesStatus.Err).
func (c *Client) watchFailed(err error) {
	err = explainHTTPPort(err)
	if rs := c.rules.Load(); (rs == nil || rs.cached) && c.ctx.Err() == nil {
		c.rulesErr.Store(&err)
	}
}

// applyRuleSet compiles and installs a rule set from the cluster, and
// writes it to the rules cache. A set that does not compile (a newer
// server's rule this client cannot read) is logged and skipped; the
// previous one stays in use. Versions only go forward, from a set the
// cluster sent and from the cache's alike: a set older than the cached
// one is logged and skipped until the cluster passes the cache's version.
func (c *Client) applyRuleSet(p *weirv1.RuleSet) {
	rs, err := compileRuleSet(p)
	if err != nil {
		c.cfg.Logger.Error("weir client: rule set does not compile; keeping the previous one", "version", p.GetVersion(), "err", err)
		return
	}
	if cur := c.rules.Load(); cur != nil && cur.version > rs.version {
		if cur.cached {
			c.cfg.Logger.Warn("weir client: the cluster's rule set is older than the cached one; keeping the cached set until the cluster passes its version (delete the cache file if the cluster was rebuilt from empty data)",
				"version", rs.version, "cached_version", cur.version, "rules_cache", c.cfg.RulesCache)
		}
		return
	}
	rs.at = c.now()
	c.rules.Store(rs)
	c.rulesErr.Store(nil)
	c.readyOne.Do(func() { close(c.ready) })
	c.saveRulesCache(p)
}

// compileRuleSet converts and compiles a rule set from the wire.
func compileRuleSet(p *weirv1.RuleSet) (*ruleState, error) {
	set, err := rulespb.SetFromProto(p)
	if err != nil {
		return nil, err
	}
	m, err := rules.Compile(set.Rules)
	if err != nil {
		return nil, err
	}
	return &ruleState{m: m, set: set, version: set.Version}, nil
}

// loadRulesCache installs the set in Config.RulesCache, if the file holds
// a usable one; New calls it before the watches start. Anything wrong
// with the file is logged and the file ignored (it is replaced by the
// next set from the cluster).
func (c *Client) loadRulesCache() {
	path := c.cfg.RulesCache
	p, f, err := readRulesCache(path)
	var rs *ruleState
	if err == nil {
		rs, err = compileRuleSet(p)
	}
	switch {
	case errors.Is(err, errNoCache):
		c.cfg.Logger.Info("weir client: no rules cache yet; it is written when the first rule set arrives", "rules_cache", path)
		return
	case err != nil:
		c.cfg.Logger.Warn("weir client: ignoring the rules cache: unreadable or corrupt", "rules_cache", path, "err", err)
		return
	}
	rs.at, rs.cached = c.now(), true
	c.rules.Store(rs)
	c.saved = p
	c.readyOne.Do(func() { close(c.ready) })
	c.cfg.Logger.Info("weir client: rule set loaded from the rules cache; in use until the cluster sends one",
		"rules_cache", path, "version", rs.version, "saved_at", f.SavedAt, "rules", len(rs.set.Rules), "overrides", len(rs.set.Overrides))
}

// saveRulesCache writes p to Config.RulesCache unless the file holds it
// already. Only the rules watch calls it; a failure is logged (the
// gateway goes on; the next set tries again).
func (c *Client) saveRulesCache(p *weirv1.RuleSet) {
	if c.cfg.RulesCache == "" || (c.saved != nil && proto.Equal(c.saved, p)) {
		return
	}
	if err := writeRulesCache(c.cfg.RulesCache, p, c.cfg.GatewayID, c.cfg.Cluster, c.now()); err != nil {
		c.cfg.Logger.Warn("weir client: cannot write the rules cache", "rules_cache", c.cfg.RulesCache, "version", p.GetVersion(), "err", err)
		return
	}
	c.saved = p
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
		hdr, err := st.Header()
		if err != nil {
			return false, err
		}
		layout := ringLayout(hdr.Get(ringLayoutHeader))
		progressed := false
		for {
			m, err := st.Recv()
			if err != nil {
				return progressed, err
			}
			progressed = true
			c.applyMembers(m, layout)
		}
	})
}

// ringLayoutHeader is the response header of WatchMembers naming the
// ring's layout (node/api.RingLayoutHeader).
const ringLayoutHeader = "weir-ring-layout"

// ringLayout is the layout a node's RingLayoutHeader names: a node that
// sends none predates layouts and places partitions as consistent does.
func ringLayout(names []string) ring.Layout {
	if len(names) == 0 {
		return ring.LayoutConsistent
	}
	l, err := ring.ParseLayout(names[0])
	if err != nil {
		return ring.LayoutConsistent
	}
	return l
}

func (c *Client) applyMembers(m *weirv1.MembersResponse, layout ring.Layout) {
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
		Layout:            layout,
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

// explainHTTPPort names the likely mistake when a cluster address answered
// in HTTP/1.1 (a node's HTTP port given where its gRPC port belongs):
// gRPC's own error only says the frame header "looked like an HTTP/1.1
// header".
func explainHTTPPort(err error) error {
	if err == nil || !strings.Contains(err.Error(), "looked like an HTTP/1.1 header") {
		return err
	}
	return fmt.Errorf("%w (that address speaks HTTP/1.1: it is likely a node's HTTP port; Config.Cluster takes the nodes' gRPC addresses, their --grpc, default port 9090)", err)
}
