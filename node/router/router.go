package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/internal/rulecache"
	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// ErrClosed is returned once the node the router serves has closed
// (Config.Done); it is limit.ErrClosed.
var ErrClosed = limit.Errorf(limit.ErrClosed, "node: closed")

// ErrUnavailable is the "cannot answer now" of a whole check (no ring
// yet); it is limit.ErrUnavailable, so the edges answer Unavailable / 503.
var ErrUnavailable = limit.Errorf(limit.ErrUnavailable, "node: unavailable")

// ruleVersionWait bounds how long a check waits for the rule set version
// its items ask for (limit.Item.RuleVersion) to be applied here.
const ruleVersionWait = time.Second

// RuleStore is the replicated rule set (rulesraft.Store).
type RuleStore interface {
	// Current is the rule set applied here (nil before the first).
	Current() *rules.Set
	// WaitVersion blocks until the applied version is above newerThan or
	// ctx ends.
	WaitVersion(ctx context.Context, newerThan uint64) (*rules.Set, error)
}

// Engine decides the local part of a check (shard.Engine).
type Engine interface {
	Check(ctx context.Context, items []shard.Item, out []shard.Result) error
}

var _ Engine = (*shard.Engine)(nil)

// Handoff is the partition hand-off (replication.Handoff): the published
// routing table, and the pins that hold a hand-off off the partitions a
// check decides.
type Handoff interface {
	Routes() *replication.Routes
	Pin(p uint32) (ok bool, movedTo string)
	Unpin(p uint32)
}

var _ Handoff = (*replication.Handoff)(nil)

// View is one immutable look at the cluster's members, with the ring the
// view source returns beside it (Config.View).
type View interface {
	replication.View // PartitionOwner, Member
	// Addr is a member's gRPC address (false: unknown member).
	Addr(id string) (string, bool)
}

// Forwarder sends items to their owner (a network link: node/forward).
type Forwarder interface {
	// Start queues items[idx] for dest, each carrying at least rule
	// version ver and its hop count (forwarded: one more hop). Its error,
	// if any, comes back from Pending.Wait.
	Start(ctx context.Context, dest string, items []limit.Item, idx []int, ver uint64, forwarded bool) Pending
}

// Pending is a forward in flight.
type Pending interface {
	// Wait fills res[idx[j]] with the owner's answer to items[idx[j]].
	Wait(ctx context.Context, res []limit.Result) error
}

// Observer counts what the router decided (metrics, ops). Its calls do not
// block.
type Observer interface {
	// Observe sees every check the router answered to a caller (not the
	// forwarded ones), after group settlement, and how long it took.
	Observe(items []limit.Item, res []limit.Result, d time.Duration)
	// KeyCapped counts an item a shard refused at its rule's key cap.
	KeyCapped(rule string)
}

// Region is the multi-region agent (region.Agent) for global rules.
type Region interface {
	// Limit scales lim to this region's share of (rule, key).
	Limit(rule, key string, lim bucket.Limit) bucket.Limit
	// Observe tallies a local decision of a global rule.
	Observe(rule, key string, asked, spent int64)
}

// Config is what a Router is built from. Every field but Region and
// Tracer is required.
type Config struct {
	Self     string
	Rules    RuleStore
	Engine   Engine
	Handoff  Handoff
	View     func() (*ring.Ring, View) // the current ring and view; nil ring before the first
	Leaving  func() bool               // this node is leaving the ring
	Forward  Forwarder                 // items owned elsewhere
	Now      func() int64              // the decisions' clock, unix ns
	Observer Observer
	Region   Region       // nil: no regions (a nil *region.Agent must be passed as nil)
	Tracer   trace.Tracer // nil: tracing off
	Logger   *slog.Logger
	Done     <-chan struct{} // closed when the node closes: checks fail with ErrClosed
}

// Router decides or routes every item of a check: see the package doc.
type Router struct {
	cfg   Config
	rules *rulecache.Cache[*RuleView]
}

// New returns a Router over cfg's parts.
func New(cfg Config) (*Router, error) {
	if cfg.Self == "" || cfg.Rules == nil || cfg.Engine == nil || cfg.Handoff == nil || cfg.View == nil ||
		cfg.Leaving == nil || cfg.Forward == nil || cfg.Now == nil || cfg.Observer == nil || cfg.Logger == nil || cfg.Done == nil {
		return nil, errors.New("router: Config: every part but Region and Tracer is required")
	}
	return &Router{cfg: cfg, rules: rulecache.New(compileRules)}, nil
}

// Rules returns the compiled view of the current rule set.
func (r *Router) Rules() *RuleView { return r.rules.Get(r.cfg.Rules.Current()) }

// Check decides items, writing one result per item into out (len(out)
// must be len(items)): locally for partitions this node serves, otherwise
// forwarded (coalesced) to the owner. The items are valid (the edge that
// took them from a wire ran limit.DecideValid). Groups are all-or-nothing
// (limit.Item.Group): tokens an item took are given back when another item
// of its group is denied (settleGroups). An error fails the whole batch:
// ErrClosed, or ErrUnavailable while the node has no ring yet. An item
// whose RuleVersion this node has not applied within ruleVersionWait is
// answered limit.CodeUnavailable, never decided by older rules. Check
// keeps no reference to items or out once it returns.
func (r *Router) Check(ctx context.Context, items []limit.Item, out []limit.Result) error {
	start := time.Now()
	if r.cfg.Tracer != nil {
		var span trace.Span
		ctx, span = r.traceCheck(ctx, items)
		defer span.End()
	}
	if err := r.check(ctx, items, out, false); err != nil {
		return err
	}
	r.settleGroups(ctx, items, out)
	r.cfg.Observer.Observe(items, out, time.Since(start))
	return nil
}

// CheckForwarded decides items a peer forwarded, believing this node owns
// them (the Peer edge): as Check, without group settlement (the entry node
// settles) or observation, and with the hop limit (replication.Via).
func (r *Router) CheckForwarded(ctx context.Context, items []limit.Item, res []limit.Result) error {
	return r.check(ctx, items, res, true)
}

// traceCheck starts the entry span of a check: the child of ctx's span
// (an HTTP request's traceparent) or of the first sampled item (an SDK's).
func (r *Router) traceCheck(ctx context.Context, items []limit.Item) (context.Context, trace.Span) {
	ctx, span := tracing.Start(ctx, r.cfg.Tracer, "weir.check", trace.SpanKindServer, tracing.Traces(items))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("weir.node", r.cfg.Self), attribute.Int("weir.items", len(items)))
	}
	return ctx, span
}

// closed reports whether the node closed.
func (r *Router) closed() bool {
	select {
	case <-r.cfg.Done:
		return true
	default:
		return false
	}
}

// check decides or routes every item, answering each in res (as long as
// items): it resolves each item's rule and routes it (plan), waits for the
// partitions whose counters are on their way, pins the local ones, queues
// the remote parts, decides the local part, then collects the remote
// answers. forwarded is true when the items came from a peer that believes
// this node owns them.
func (r *Router) check(ctx context.Context, items []limit.Item, res []limit.Result, forwarded bool) error {
	if len(res) != len(items) {
		return fmt.Errorf("router: %d results for %d items", len(res), len(items))
	}
	if r.closed() {
		return ErrClosed
	}
	rg, v := r.cfg.View()
	if rg == nil {
		return fmt.Errorf("%w: no ring yet", ErrUnavailable)
	}
	routes := r.cfg.Handoff.Routes()
	rt := replication.Router{Self: r.cfg.Self, Leaving: r.cfg.Leaving(), Table: routes, View: v}
	rv := r.rulesFor(ctx, items)

	clear(res)
	sc := scratchPool.Get().(*checkScratch)
	defer sc.release()
	r.plan(sc, &rt, rg, rv, items, res, forwarded)
	if err := r.waitReady(ctx, routes, sc.waits); err != nil {
		return err
	}
	sc.pin(r.cfg.Handoff, &rt, rg.PartitionCount(), items, res, forwarded)
	defer sc.unpin(r.cfg.Handoff) // on early returns; unpinned after the local decision

	// Queue the remote parts first so they travel while the local part is
	// decided, then decide locally, then collect the remote answers.
	calls := sc.sortedRemote()
	for j := range calls {
		rc := &calls[j]
		rc.p = r.cfg.Forward.Start(ctx, rc.dest, items, rc.idx, rv.Version, forwarded)
	}
	if err := r.decideLocal(ctx, sc, rv, items, res); err != nil {
		return err
	}
	for _, rc := range calls {
		if err := rc.p.Wait(ctx, res); err != nil {
			for _, i := range rc.idx {
				res[i].Code, res[i].Err = limit.CodeUnavailable, "owner "+rc.dest+" unreachable: "+err.Error()
			}
		}
	}
	return nil
}

// remoteCall is one destination's part of a check in flight.
type remoteCall struct {
	dest string
	idx  []int // positions in the caller's items
	p    Pending
}

// rulesFor is the rule view to decide items by. The caller matched
// against a newer rule set than this node has applied yet (a gateway
// whose watch is ahead, an admin checking right after a write answered
// elsewhere: limit.Item.RuleVersion), or a peer that forwarded the items
// is ahead (e.g. this node just joined): it waits for it briefly.
func (r *Router) rulesFor(ctx context.Context, items []limit.Item) *RuleView {
	rv := r.Rules()
	var want uint64
	for i := range items {
		want = max(want, items[i].RuleVersion)
	}
	if want > rv.Version {
		wctx, cancel := context.WithTimeout(ctx, ruleVersionWait)
		_, _ = r.cfg.Rules.WaitVersion(wctx, want-1)
		cancel()
		rv = r.Rules()
	}
	return rv
}

// plan resolves every item's rule and limit and routes it: answered here
// (unknown rule, blocked, ...), forwarded (sc.remote, by destination), or
// decided locally (sc.local, sc.idx; sc.waits for the partitions whose
// counters are on their way).
func (r *Router) plan(sc *checkScratch, rt *replication.Router, rg *ring.Ring, rv *RuleView, items []limit.Item, res []limit.Result, forwarded bool) {
	now := time.Unix(0, r.cfg.Now())
	for i := range items {
		it := &items[i]
		cr, lim, ok := resolve(rv, it, &res[i], forwarded, now)
		if !ok {
			continue
		}
		p := rg.Partition(it.Key)
		switch to := rt.Route(p, replication.Via{Forwarded: forwarded, Hops: it.Hops}); to.Do {
		case replication.Forward:
			sc.addRemote(to.To, i)
			continue
		case replication.Unavailable:
			res[i].Code, res[i].Err = limit.CodeUnavailable, to.Why
			continue
		case replication.Wait:
			sc.waits = append(sc.waits, p)
		}
		sc.local = append(sc.local, r.shardItem(cr, it, p, lim))
		sc.idx = append(sc.idx, i)
	}
}

// resolve finds it's rule and limit in rv, filling what res reports of
// them. ok is false when res is already the answer: a rule version not
// applied, an unknown rule, a permit mismatch, a key blocked by an
// override.
func resolve(rv *RuleView, it *limit.Item, res *limit.Result, forwarded bool, now time.Time) (cr *CompiledRule, lim bucket.Limit, ok bool) {
	cr = rv.Rules[it.Rule]
	if it.RuleVersion > rv.Version && (!forwarded || cr == nil) {
		// Never decide a caller's item by an older rule set than it
		// asked for. A peer's item is (the version is the entry
		// node's, which the caller did not ask for), unless its rule
		// is missing here: that is not "unknown rule" yet.
		res.Code, res.Err = limit.CodeUnavailable, fmt.Sprintf("rules version %d not applied on this node within %s (it is at %d); retry", it.RuleVersion, ruleVersionWait, rv.Version)
		return nil, lim, false
	}
	if cr == nil {
		res.Code, res.Err = limit.CodeUnknownRule, fmt.Sprintf("unknown rule %q", it.Rule)
		return nil, lim, false
	}
	res.RuleVersion = rv.Version
	if msg := permitMismatch(cr, it); msg != "" {
		res.Code, res.Err = limit.CodeInvalid, msg
		return nil, lim, false
	}
	lim, blocked, blockedFor := rv.effective(cr, it.Key, now)
	if o := it.Override; o != nil && !blocked {
		lim.Rate, lim.Period, lim.Burst = o.Rate, o.Period, o.Burst
		lim.Calendar = nil // the descriptor's own unit replaces a calendar
		if lim.Burst <= 0 {
			lim.Burst = o.Rate
		}
	}
	res.Limit = lim.Capacity()
	res.Window = cr.window
	if it.Override != nil {
		res.Window = it.Override.Period.Truncate(time.Millisecond)
	}
	res.Shadow = cr.Rule.Shadow
	if blocked {
		res.Allowed = false
		res.RetryAfter = blockedFor
		return nil, lim, false
	}
	return cr, lim, true
}

// shardItem is it as the shard engine decides it, in partition p under lim.
func (r *Router) shardItem(cr *CompiledRule, it *limit.Item, p uint32, lim bucket.Limit) shard.Item {
	group := it.Group
	if cr.Rule.Shadow {
		group = 0 // shadow rules never block their group
	}
	auto := cr.auto && it.Override == nil
	var gw uint64
	if auto {
		gw = it.LeaseGateway
	}
	return shard.Item{
		ID:        shard.CounterID(it.Rule, it.Key),
		Partition: p,
		Limit:     r.regionLimit(cr, it.Key, lim),
		Cost:      it.Cost,
		Refund:    it.Refund,
		Auto:      auto,
		Volatile:  cr.volatile,
		Group:     group,
		Cap:       cr.cap,
		Gateway:   gw,
		Release:   it.Release,
		Floor:     cr.floor(it.Priority, lim),
	}
}

// waitReady waits for the partitions whose counters are on their way
// (replication.Wait), in order.
func (r *Router) waitReady(ctx context.Context, routes *replication.Routes, waits []uint32) error {
	slices.Sort(waits)
	for _, p := range slices.Compact(waits) {
		select {
		case <-routes.Ready(p):
		case <-ctx.Done():
			return ctx.Err()
		case <-r.cfg.Done:
			return ErrClosed
		}
	}
	return nil
}

// decideLocal decides the local part through the shard engine and unpins
// its partitions.
func (r *Router) decideLocal(ctx context.Context, sc *checkScratch, rv *RuleView, items []limit.Item, res []limit.Result) error {
	if len(sc.local) == 0 {
		return nil
	}
	sc.out = slices.Grow(sc.out[:0], len(sc.local))[:len(sc.local)]
	if err := r.cfg.Engine.Check(ctx, sc.local, sc.out); err != nil {
		return err
	}
	sc.unpin(r.cfg.Handoff)
	for j, i := range sc.idx {
		fillResult(&res[i], sc.out[j])
		if !sc.out[j].Permit.Zero() {
			res[i].PermitExpires = sc.local[j].Limit.Period
		}
		if sc.out[j].KeyCap {
			r.keyCapped(&res[i], items[i].Rule)
		}
	}
	r.regionObserve(rv, items, sc.idx, sc.out)
	return nil
}

// keyCapped answers an item the shard refused at its rule's key cap: the
// node cannot track one more key of the rule. It has a code of its own
// (CodeKeyCap), treated like an owner that cannot decide, so the rule's
// fail mode applies at the caller (the SDK: open falls back to its local share,
// closed denies). Existing keys of the rule are unaffected.
func (r *Router) keyCapped(res *limit.Result, rule string) {
	res.Allowed = false
	res.Code, res.Err = limit.CodeKeyCap, "key_cap: rule "+rule+" holds its max_keys live keys on this node"
	r.cfg.Observer.KeyCapped(rule)
}

func fillResult(r *limit.Result, b shard.Result) {
	r.Allowed = b.Allowed
	r.Remaining = b.Remaining
	r.Limit = b.Limit
	r.Reset = b.ResetAfter
	r.RetryAfter = b.RetryAfter
	r.Voided = b.Voided
	r.LeaseGranted = b.Granted
	r.Permit = b.Permit
	r.Shed = b.Shed
}

// Limits peeks (cost 0) every rule that applies to key, sorted by rule:
// the rules whose key type the key is of ("apikey:ak_1" → key apikey;
// "header:X-Tenant:t1" → key header:X-Tenant; "global:global" → key
// global). It returns the items peeked and their results; a key of a type
// no rule limits gets none.
func (r *Router) Limits(ctx context.Context, key string) ([]limit.Item, []limit.Result, error) {
	rv := r.Rules()
	var items []limit.Item
	for id, cr := range rv.Rules {
		if appliesTo(&cr.Rule, key) {
			items = append(items, limit.Item{Key: key, Rule: id})
		}
	}
	slices.SortFunc(items, func(a, b limit.Item) int { return strings.Compare(a.Rule, b.Rule) })
	res := make([]limit.Result, len(items))
	if len(items) > 0 {
		if err := r.check(ctx, items, res, false); err != nil {
			return nil, nil, err
		}
	}
	return items, res, nil
}

// Owner reports whether this node owns key, else the gRPC address of the
// node that does (ok false: no ring or owner address yet): the region
// agent's question (region.Cluster).
func (r *Router) Owner(key string) (self bool, addr string, ok bool) {
	rg, v := r.cfg.View()
	if rg == nil {
		return false, "", false
	}
	owner := rg.PartitionOwner(rg.Partition(key))
	if owner == r.cfg.Self {
		return true, "", true
	}
	addr, ok = v.Addr(owner)
	return false, addr, ok
}

// regionLimit is lim scaled to this region's share of (rule, key) for a
// global rule; lim itself otherwise.
func (r *Router) regionLimit(cr *CompiledRule, key string, lim bucket.Limit) bucket.Limit {
	if r.cfg.Region == nil || !cr.Rule.Global() {
		return lim
	}
	return r.cfg.Region.Limit(cr.Rule.ID, key, lim)
}

// regionObserve tallies the local decisions of global rules.
func (r *Router) regionObserve(rv *RuleView, items []limit.Item, idx []int, out []shard.Result) {
	if r.cfg.Region == nil {
		return
	}
	for j, i := range idx {
		it := &items[i]
		if it.Refund {
			continue
		}
		if cr := rv.Rules[it.Rule]; cr != nil && cr.Rule.Global() {
			var spent int64
			if out[j].Allowed {
				spent = it.Cost
			}
			r.cfg.Region.Observe(it.Rule, it.Key, it.Cost, spent)
		}
	}
}
