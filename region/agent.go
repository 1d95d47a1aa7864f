package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/bucket"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/region/share"
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("invalid regions setup")

// Config is one node's view of the regions.
type Config struct {
	// Region is this node's region.
	Region string
	// Peers maps every other region to a gRPC address of it (any node, or
	// a load balancer in front of its nodes).
	Peers map[string]string
	// Interval between exchanges (default 250ms).
	Interval time.Duration
	// Timeout bounds one exchange (default 1s; at most LostAfter-Interval).
	Timeout time.Duration
	// Floor, LostAfter, ClaimAfter, IdleAfter: see share.Config (0: its
	// defaults).
	Floor      int64
	LostAfter  time.Duration
	ClaimAfter time.Duration
	IdleAfter  time.Duration
	// DialOptions open the connections to peer regions and to the owners
	// of keys in this region: the node passes the options it dials its
	// own peers with (so TLS, once configured, covers regions too).
	DialOptions []grpc.DialOption
	Logger      *slog.Logger
	// Now is the clock in unix ns (default time.Now).
	Now func() int64
}

// ShareConfig returns the allocator config c describes.
func (c Config) ShareConfig() share.Config {
	regions := []string{c.Region}
	for r := range c.Peers {
		regions = append(regions, r)
	}
	sc := share.DefaultConfig(c.Region, regions)
	if c.Floor != 0 {
		sc.Floor = c.Floor
		sc.IdleFloor = c.Floor / 10
	}
	if c.LostAfter != 0 {
		sc.LostAfter = c.LostAfter
	}
	if c.ClaimAfter != 0 {
		sc.ClaimAfter = c.ClaimAfter
	} else if c.LostAfter != 0 {
		sc.ClaimAfter = c.LostAfter + 2*time.Second
	}
	if c.Interval != 0 {
		sc.Interval = c.Interval
	}
	if c.IdleAfter != 0 {
		sc.IdleAfter = c.IdleAfter
	}
	return sc
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.Region == "" {
		return fmt.Errorf("%w: region name is required", ErrConfig)
	}
	if len(c.Peers) == 0 {
		return fmt.Errorf("%w: no peer regions", ErrConfig)
	}
	for r, addr := range c.Peers {
		if r == c.Region {
			return fmt.Errorf("%w: region %q lists itself as a peer", ErrConfig, r)
		}
		if addr == "" || strings.ContainsAny(r, ",= ") || r == "" {
			return fmt.Errorf("%w: peer region %q=%q: want name=host:port", ErrConfig, r, addr)
		}
	}
	if c.Interval < 0 || c.Timeout < 0 {
		return fmt.Errorf("%w: interval and timeout must be >= 0", ErrConfig)
	}
	if err := c.ShareConfig().Validate(); err != nil {
		return shareProblem(err)
	}
	return nil
}

// shareProblem is a share.Config problem as one of Config: the share's
// detail under ErrConfig.
func shareProblem(err error) error {
	return fmt.Errorf("%w: %s", ErrConfig, strings.TrimPrefix(err.Error(), share.ErrConfig.Error()+": "))
}

// ParsePeers reads "eu=host:port,us=host:port".
func ParsePeers(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, addr, ok := strings.Cut(part, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("%w: peer region %q: want name=host:port", ErrConfig, part)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%w: peer region %q listed twice", ErrConfig, name)
		}
		out[name] = addr
	}
	return out, nil
}

// Cluster is what the agent needs from its node: where a key's counters
// live in this region.
type Cluster interface {
	// Owner reports whether this node owns key, else the gRPC address of
	// the node that does (ok false: no owner known yet).
	Owner(key string) (self bool, addr string, ok bool)
}

// Agent is one node's part in the regions: it holds the allocator table
// for the global keys this node owns, exchanges it with the peer regions
// every Interval, and answers their exchanges. One goroutine (Run) owns
// the table; the check path reads published snapshots and adds to a
// mutex-guarded tally.
type Agent struct {
	weirv1.UnimplementedRegionServer

	cfg     Config
	scfg    share.Config
	log     *slog.Logger
	cluster Cluster
	regions []string
	self    int
	table   *share.Table // Run's goroutine only

	snap atomic.Pointer[share.Snapshot]

	tallyMu sync.Mutex
	tally   map[string]*count

	ops chan func() // run on Run's goroutine

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn

	handoffs sync.WaitGroup // hand-ons to new owners in flight (joined by Run)

	exchanges, failures atomic.Int64
	minority            atomic.Bool  // as of the last step
	keys                atomic.Int64 // held by the table, as of the last step
	// changed is when this node's ring last changed (unix ns; 0: never):
	// until settle after it, a key the table does not hold may be one
	// whose ledger the previous owner is handing on (see Share).
	changed atomic.Int64
	settle  int64 // ns: 2 × Interval + Timeout
}

// Counters are the agent's totals for metrics (safe from any goroutine).
type Counters struct {
	Exchanges, Failures, Keys int64
	Minority                  bool
}

// Counters reads the agent's totals.
func (a *Agent) Counters() Counters {
	return Counters{Exchanges: a.exchanges.Load(), Failures: a.failures.Load(), Keys: a.keys.Load(), Minority: a.minority.Load()}
}

type count struct{ asked, spent int64 }

// New returns an agent; call Run to start exchanging.
func New(cfg Config, cluster Cluster) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = func() int64 { return time.Now().UnixNano() }
	}
	scfg := cfg.ShareConfig()
	scfg.Interval = cfg.Interval
	t, err := share.New(scfg, cfg.Now())
	if err != nil {
		return nil, shareProblem(err)
	}
	a := &Agent{cfg: cfg, scfg: scfg, log: cfg.Logger, cluster: cluster, regions: t.Regions(), self: t.Self(), table: t,
		tally: map[string]*count{}, ops: make(chan func(), 64), conns: map[string]*grpc.ClientConn{}}
	a.settle = int64(2*cfg.Interval + cfg.Timeout)
	a.snap.Store(t.Snapshot())
	return a, nil
}

// RingChanged tells the agent that this node's ring changed (the node
// calls it on every new ring): for the next 2 × Interval + Timeout, by
// when the previous owner of a key that moved here has stepped and handed
// its records on (Run's step, handOn), a key the table does not hold is
// decided with at most the floor. Without it the new owner would decide
// with the key's initial share (all but the floors in the key's home
// region) until the hand-on arrives. (Its tally is folded in as before:
// holding it back too left a region admitting half its share for good in
// TestRegionsShareOneQuota, cause not found; see docs/design.md.)
func (a *Agent) RingChanged() { a.changed.Store(a.cfg.Now()) }

// settling reports whether a ring change is recent enough that a key the
// table does not hold may still be handed on (the clock is read only
// after a ring change).
func (a *Agent) settling() bool {
	c := a.changed.Load()
	return c != 0 && a.cfg.Now()-c < a.settle
}

// Regions returns every region name, sorted.
func (a *Agent) Regions() []string { return slices.Clone(a.regions) }

// tableKey joins a rule and a limited key into the allocator's key.
func tableKey(rule, key string) string { return rule + "\x00" + key }

func splitKey(k string) (rule, key string) {
	rule, key, _ = strings.Cut(k, "\x00")
	return rule, key
}

// Share is this region's share of (rule, key), in share.Whole: the
// latest snapshot's; for a key it does not hold shortly after a ring
// change (RingChanged), at most the floor.
func (a *Agent) Share(rule, key string) int64 {
	k := tableKey(rule, key)
	s := a.snap.Load()
	sh := s.Share(k)
	if sh > a.scfg.Floor && !s.Has(k) && a.settling() {
		return a.scfg.Floor
	}
	return sh
}

// Limit scales a global rule's limit to this region's share of it.
func (a *Agent) Limit(rule, key string, l bucket.Limit) bucket.Limit {
	return Scale(l, a.Share(rule, key), len(a.regions))
}

// Observe adds a decision on (rule, key) to this interval's tally: asked
// tokens requested, spent of them admitted.
func (a *Agent) Observe(rule, key string, asked, spent int64) {
	k := tableKey(rule, key)
	a.tallyMu.Lock()
	c := a.tally[k]
	if c == nil {
		c = &count{}
		a.tally[k] = c
	}
	c.asked += asked
	c.spent += spent
	a.tallyMu.Unlock()
}

// Scale returns l limited to share/Whole of it, for one of n regions. The
// bucket algorithms move only their rate with the share (by stretching the
// period) and keep a fixed 1/n of the burst (at least one token): a
// bucket keeps its missing tokens when its limit changes, so a burst that
// grew with the share would hand out the growth at once. The window
// algorithms scale the rate. The regions' rates add up to at most the
// global rate, their capacities to at most the global capacity (plus one
// token per region when the burst is smaller than n).
func Scale(l bucket.Limit, sh int64, n int) bucket.Limit {
	if sh <= 0 || l.Rate <= 0 {
		l.Rate = 0
		return l
	}
	if n < 1 {
		n = 1
	}
	f := min(1, float64(sh)/float64(share.Whole))
	switch l.Algorithm {
	case bucket.TokenBucket, bucket.LeakyBucket:
		p := float64(l.Period) / f
		if p > float64(bucket.MaxIdle)/2 {
			p = float64(bucket.MaxIdle) / 2
		}
		capacity := l.Capacity()
		l.Period = time.Duration(p)
		l.Burst = max(1, capacity/int64(n))
	default:
		l.Rate = int64(math.Floor(float64(l.Rate) * f))
	}
	return l
}

// Run exchanges every Interval until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	results := make(chan result, len(a.regions))
	// busy[i]: an exchange with region i is still out. A slow peer skips
	// its own turns only, so it never holds up the exchanges with the
	// others (and with them this region's majority).
	busy := make([]bool, len(a.regions))
	for {
		select {
		case <-ctx.Done():
			for i := range busy {
				if busy[i] {
					<-results
				}
			}
			a.handoffs.Wait()
			return nil
		case op := <-a.ops:
			op()
		case r := <-results:
			busy[r.peer] = false
			a.absorb(r)
		case <-tick.C:
			out := a.step(ctx)
			for i, name := range a.regions {
				if i == a.self || busy[i] {
					continue
				}
				busy[i] = true
				go func() { results <- a.exchange(ctx, i, name, out) }()
			}
		}
	}
}

type result struct {
	peer int
	at   int64
	resp *weirv1.RegionExchangeResponse
	err  error
}

// step folds the tally in, drops keys this node no longer owns, steps the
// table and publishes its shares; it returns the batch to send.
func (a *Agent) step(ctx context.Context) []*weirv1.RegionKey {
	a.tallyMu.Lock()
	tally := a.tally
	a.tally = make(map[string]*count, len(tally))
	a.tallyMu.Unlock()
	for k, c := range tally {
		_, key := splitKey(k)
		if self, _, ok := a.cluster.Owner(key); ok && self {
			a.table.Observe(k, c.asked, c.spent)
		}
	}
	moved := map[string]map[string][]share.Record{} // new owner's address -> key -> records
	shared := a.table.Outbox()
	for _, k := range a.table.Keys() {
		_, key := splitKey(k)
		if self, addr, ok := a.cluster.Owner(key); ok && !self {
			if recs, ok := shared[k]; ok && addr != "" {
				if moved[addr] == nil {
					moved[addr] = map[string][]share.Record{}
				}
				moved[addr][k] = recs
			}
			a.table.Forget(k)
		}
	}
	for addr, keys := range moved {
		a.handOn(ctx, addr, keys)
	}
	a.table.Step(a.cfg.Now())
	a.snap.Store(a.table.Snapshot())
	a.minority.Store(a.table.Minority())
	a.keys.Store(int64(len(a.table.Keys())))
	return toWire(a.table.Outbox())
}

// handOn sends the records of keys this node no longer owns to their new
// owner in this region, which adopts them (Table.Adopt): the new owner
// goes on from the region's ledger as this node left it, not from the
// defaults or from a peer region's older relay. Best effort: a lost
// hand-on leaves the new owner to recover the records from the peers'
// relays, as before.
func (a *Agent) handOn(ctx context.Context, addr string, keys map[string][]share.Record) {
	req := &weirv1.RegionExchangeRequest{From: a.cfg.Region, Regions: a.regions, Keys: toWire(keys), Handoff: true}
	a.handoffs.Add(1)
	go func() {
		defer a.handoffs.Done()
		conn, err := a.conn(addr)
		if err != nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
		defer cancel()
		if _, err := weirv1.NewRegionClient(conn).Exchange(cctx, req); err != nil {
			a.log.Debug("region hand-on failed", "to", addr, "keys", len(keys), "err", err)
		}
	}()
}

func (a *Agent) request(keys []*weirv1.RegionKey, forwarded bool) *weirv1.RegionExchangeRequest {
	return &weirv1.RegionExchangeRequest{From: a.cfg.Region, Regions: a.regions, Keys: keys, Forwarded: forwarded}
}

func (a *Agent) exchange(ctx context.Context, peer int, name string, keys []*weirv1.RegionKey) result {
	r := result{peer: peer}
	conn, err := a.conn(a.cfg.Peers[name])
	if err != nil {
		a.failures.Add(1)
		r.err = err
		return r
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	r.resp, r.err = weirv1.NewRegionClient(conn).Exchange(cctx, a.request(keys, false))
	r.at = a.cfg.Now()
	a.exchanges.Add(1)
	if r.err != nil {
		a.failures.Add(1)
	}
	return r
}

// absorb merges a peer region's answer and takes the grants it carries
// (on Run's goroutine).
func (a *Agent) absorb(r result) {
	if r.err != nil {
		a.log.Debug("region exchange failed", "peer", a.regions[r.peer], "err", r.err)
		return
	}
	a.table.RoundTrip(r.peer, r.at)
	now, took := a.cfg.Now(), false
	for _, k := range r.resp.GetKeys() {
		key := tableKey(k.GetRule(), k.GetKey())
		if self, _, ok := a.cluster.Owner(k.GetKey()); ok && self {
			a.table.Merge(r.peer, key, fromWire(k.GetRecords()))
			took = a.table.Take(key, now) || took
		}
	}
	if took {
		a.snap.Store(a.table.Snapshot())
	}
}

// Exchange answers a peer region: it merges the records of the keys this
// node owns and answers with its own, and passes the other keys on to
// their owners in this region (once).
func (a *Agent) Exchange(ctx context.Context, req *weirv1.RegionExchangeRequest) (*weirv1.RegionExchangeResponse, error) {
	from := slices.Index(a.regions, req.GetFrom())
	if req.GetHandoff() && from == a.self && slices.Equal(req.GetRegions(), a.regions) {
		return a.adopt(ctx, req)
	}
	if from < 0 || from == a.self || !slices.Equal(req.GetRegions(), a.regions) {
		return nil, status.Errorf(codes.FailedPrecondition, "exchange from region %q with regions %v; this region (%s) is configured with %v",
			req.GetFrom(), req.GetRegions(), a.cfg.Region, a.regions)
	}
	local := []*weirv1.RegionKey{}
	remote := map[string][]*weirv1.RegionKey{}
	for _, k := range req.GetKeys() {
		self, addr, ok := a.cluster.Owner(k.GetKey())
		if self || !ok || req.GetForwarded() {
			local = append(local, k)
			continue
		}
		remote[addr] = append(remote[addr], k)
	}
	type fwd struct {
		resp *weirv1.RegionExchangeResponse
		err  error
	}
	fwds := make(chan fwd, len(remote))
	for addr, keys := range remote {
		go func() {
			conn, err := a.conn(addr)
			if err != nil {
				fwds <- fwd{err: err}
				return
			}
			cctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
			defer cancel()
			fr := &weirv1.RegionExchangeRequest{From: req.GetFrom(), Regions: req.GetRegions(), Keys: keys, Forwarded: true}
			resp, err := weirv1.NewRegionClient(conn).Exchange(cctx, fr)
			fwds <- fwd{resp, err}
		}()
	}
	resp := &weirv1.RegionExchangeResponse{From: a.cfg.Region}
	done := make(chan []*weirv1.RegionKey, 1)
	now := a.cfg.Now()
	op := func() {
		a.table.Heard(from, now)
		out := make([]*weirv1.RegionKey, 0, len(local))
		for _, k := range local {
			a.table.Merge(from, tableKey(k.GetRule(), k.GetKey()), fromWire(k.GetRecords()))
		}
		// Give toward the demand the records report (when this region
		// does not use the key) and answer with the result: the grant
		// reaches the peer one round trip after its demand did.
		at := a.cfg.Now()
		moved := false
		for _, k := range local {
			key := tableKey(k.GetRule(), k.GetKey())
			moved = a.table.Take(key, at) || moved
			moved = a.table.Rebalance(key, at) || moved
			out = append(out, &weirv1.RegionKey{Rule: k.GetRule(), Key: k.GetKey(), Records: recordsToWire(a.table.Records(key))})
		}
		if moved {
			a.snap.Store(a.table.Snapshot())
		}
		done <- out
	}
	select {
	case a.ops <- op:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	select {
	case out := <-done:
		resp.Keys = append(resp.Keys, out...)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	for range remote {
		f := <-fwds
		if f.err == nil {
			resp.Keys = append(resp.Keys, f.resp.GetKeys()...)
		}
	}
	return resp, nil
}

// adopt takes a hand-on from this region's previous owner of the keys:
// the keys this node owns adopt the records (on Run's goroutine).
func (a *Agent) adopt(ctx context.Context, req *weirv1.RegionExchangeRequest) (*weirv1.RegionExchangeResponse, error) {
	done := make(chan struct{})
	op := func() {
		defer close(done)
		for _, k := range req.GetKeys() {
			if self, _, ok := a.cluster.Owner(k.GetKey()); ok && self {
				a.table.Adopt(tableKey(k.GetRule(), k.GetKey()), fromWire(k.GetRecords()))
			}
		}
		a.snap.Store(a.table.Snapshot())
	}
	select {
	case a.ops <- op:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	select {
	case <-done:
		return &weirv1.RegionExchangeResponse{From: a.cfg.Region}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (a *Agent) conn(addr string) (*grpc.ClientConn, error) {
	a.connMu.Lock()
	defer a.connMu.Unlock()
	if a.conns == nil {
		return nil, errors.New("region exchange closed")
	}
	if c := a.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(addr, a.cfg.DialOptions...)
	if err != nil {
		return nil, fmt.Errorf("dialing region at %s: %w", addr, err)
	}
	a.conns[addr] = c
	return c, nil
}

// Close closes the connections (after Run returned).
func (a *Agent) Close() {
	a.connMu.Lock()
	defer a.connMu.Unlock()
	for _, c := range a.conns {
		_ = c.Close()
	}
	a.conns = nil
}

// Status is what an operator sees of the agent.
type Status struct {
	Region    string
	Regions   []string
	Minority  bool
	Keys      int
	Exchanges int64
	Failures  int64
}

// Status reports the agent's state (from Run's goroutine; ctx bounds the wait).
func (a *Agent) Status(ctx context.Context) (Status, error) {
	ch := make(chan Status, 1)
	op := func() {
		ch <- Status{Region: a.cfg.Region, Regions: a.Regions(), Minority: a.table.Minority(), Keys: len(a.table.Keys()),
			Exchanges: a.exchanges.Load(), Failures: a.failures.Load()}
	}
	select {
	case a.ops <- op:
	case <-ctx.Done():
		return Status{}, ctx.Err()
	}
	select {
	case s := <-ch:
		return s, nil
	case <-ctx.Done():
		return Status{}, ctx.Err()
	}
}

// Shares returns this region's share of every key the agent holds, by
// rule and key (for tests and the status page).
func (a *Agent) Shares() map[[2]string]int64 {
	out := map[[2]string]int64{}
	s := a.snap.Load()
	for _, k := range s.Keys() {
		rule, key := splitKey(k)
		out[[2]string{rule, key}] = s.Share(k)
	}
	return out
}

func toWire(out map[string][]share.Record) []*weirv1.RegionKey {
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ws := make([]*weirv1.RegionKey, 0, len(keys))
	for _, k := range keys {
		rule, key := splitKey(k)
		ws = append(ws, &weirv1.RegionKey{Rule: rule, Key: key, Records: recordsToWire(out[k])})
	}
	return ws
}

// Ledger returns the records this node holds for (rule, key), nil when it
// does not hold the key (from Run's goroutine; ctx bounds the wait).
func (a *Agent) Ledger(ctx context.Context, rule, key string) ([]share.Record, error) {
	ch := make(chan []share.Record, 1)
	op := func() { ch <- a.table.Records(tableKey(rule, key)) }
	select {
	case a.ops <- op:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case rs := <-ch:
		return rs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
