package node

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/forward"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// ruleView is the rule set compiled for the check path, rebuilt when the
// Raft FSM publishes a new version.
type ruleView struct {
	version   uint64
	rules     map[string]*compiledRule
	overrides map[ovKey]rules.Override
}

type ovKey struct{ rule, key string }

type compiledRule struct {
	rule   rules.Rule
	auto   bool // lease: auto, and a rule the owner may lease (autoLeasable)
	limit  bucket.Limit
	window time.Duration // rule.Period, in whole milliseconds as the wire reports it
	cap    *shard.KeyCap // the rule's key cap, shared by its shard items

	volatile bool // durable: off: its counters are never written to a data dir
}

// rules returns the compiled view of the current rule set.
func (n *Node) rules() *ruleView {
	set := n.store.Current()
	var ver uint64
	if set != nil {
		ver = set.Version
	}
	if v := n.rview.Load(); v != nil && v.version == ver {
		return v
	}
	n.rviewMu.Lock()
	defer n.rviewMu.Unlock()
	if v := n.rview.Load(); v != nil && v.version == ver {
		return v
	}
	v := &ruleView{version: ver, rules: map[string]*compiledRule{}, overrides: map[ovKey]rules.Override{}}
	if set != nil {
		for _, r := range set.Rules {
			r = rules.Normalize(r)
			v.rules[r.ID] = &compiledRule{rule: r, limit: r.Limit(), window: r.Window().Truncate(time.Millisecond),
				cap: &shard.KeyCap{Rule: r.ID, MaxKeys: r.MaxKeys}, auto: autoLeasable(&r), volatile: !r.IsDurable()}
		}
		for _, o := range set.Overrides {
			v.overrides[ovKey{o.Rule, o.Key}] = o
		}
	}
	n.rview.Store(v)
	return v
}

// autoLeasable reports whether the owner may lease r's hot keys on its
// own: lease auto, and not a shadow rule (never blocks), a global-scope
// rule (its quota is shared with other regions), an unlimited one, or a
// long window (rules.Rule.Leasable: a calendar window or a period of an
// hour or more, whose leased tokens would come back only at its end).
func autoLeasable(r *rules.Rule) bool {
	return r.Lease == rules.LeaseAuto && !r.Shadow && !r.Global() && !r.Unlimited && r.Leasable()
}

// effective resolves a rule's limit for key at now, honouring an active
// override. blockedFor is the time until a block ends (Never: forever).
func (v *ruleView) effective(cr *compiledRule, key string, now time.Time) (lim bucket.Limit, blocked bool, blockedFor time.Duration) {
	if len(v.overrides) > 0 {
		if o, ok := v.overrides[ovKey{cr.rule.ID, key}]; ok && o.Active(now) {
			lim, blocked = rules.Effective(&cr.rule, &o)
			if blocked {
				if o.ExpiresAt.IsZero() {
					return lim, true, bucket.Never
				}
				return lim, true, o.ExpiresAt.Sub(now)
			}
			return lim, false, 0
		}
	}
	return cr.limit, false, 0
}

// ruleVersionWait bounds how long a check waits for the rule set version
// its items ask for (limit.Item.RuleVersion) to be applied here.
const ruleVersionWait = time.Second

// Check decides items, writing one result per item into out (len(out)
// must be len(items)): locally for partitions this node serves, otherwise
// forwarded (coalesced) to the owner. The items are valid (the edge that
// took them from a wire ran limit.DecideValid). Groups are all-or-nothing
// (limit.Item.Group): tokens an item took are given back when another item
// of its group is denied. An error fails the whole batch: ErrClosed, or
// limit.ErrUnavailable while the node has no ring yet. An item whose
// RuleVersion this node has not applied within ruleVersionWait is answered
// limit.CodeUnavailable, never decided by older rules. Check keeps no
// reference to items or out once it returns.
func (n *Node) Check(ctx context.Context, items []limit.Item, out []limit.Result) error {
	start := time.Now()
	if n.tracer != nil {
		var span trace.Span
		ctx, span = n.traceCheck(ctx, items)
		defer span.End()
	}
	if err := n.check(ctx, items, out, false); err != nil {
		return err
	}
	n.settleGroups(ctx, items, out)
	n.ops.Observe(items, out, time.Since(start))
	return nil
}

// check decides or routes every item, answering each in res (as long as
// items). forwarded is true when the items came from a peer that believes
// this node owns them.
func (n *Node) check(ctx context.Context, items []limit.Item, res []limit.Result, forwarded bool) error {
	if len(res) != len(items) {
		return fmt.Errorf("node: %d results for %d items", len(res), len(items))
	}
	if n.ctx.Err() != nil {
		return ErrClosed
	}
	v := n.cluster.View()
	if v == nil {
		return fmt.Errorf("%w: no ring yet", errUnavailable)
	}
	routes := n.handoff.Routes()
	rt := replication.Router{Self: n.cfg.ID, Leaving: n.cluster.Leaving(), Table: routes, View: v}
	rv := n.rules()
	// The caller matched against a newer rule set than this node has
	// applied yet (a gateway whose watch is ahead, an admin checking right
	// after a write answered elsewhere: limit.Item.RuleVersion), or a peer
	// that forwarded the items is ahead (e.g. this node just joined): wait
	// for it briefly.
	var want uint64
	for i := range items {
		want = max(want, items[i].RuleVersion)
	}
	if want > rv.version {
		wctx, cancel := context.WithTimeout(ctx, ruleVersionWait)
		_, _ = n.store.WaitVersion(wctx, want-1)
		cancel()
		rv = n.rules()
	}
	nowNS := n.now()
	now := time.Unix(0, nowNS)

	clear(res)
	sc := scratchPool.Get().(*checkScratch)
	defer sc.release()
	var remote map[string][]int // by destination; sent in the order of their names
	for i := range items {
		it, r := &items[i], &res[i]
		cr := rv.rules[it.Rule]
		if it.RuleVersion > rv.version && (!forwarded || cr == nil) {
			// Never decide a caller's item by an older rule set than it
			// asked for. A peer's item is (the version is the entry
			// node's, which the caller did not ask for), unless its rule
			// is missing here: that is not "unknown rule" yet.
			r.Code, r.Err = limit.CodeUnavailable, fmt.Sprintf("rules version %d not applied on this node within %s (it is at %d); retry", it.RuleVersion, ruleVersionWait, rv.version)
			continue
		}
		if cr == nil {
			r.Code, r.Err = limit.CodeUnknownRule, fmt.Sprintf("unknown rule %q", it.Rule)
			continue
		}
		r.RuleVersion = rv.version
		if msg := permitMismatch(cr, it); msg != "" {
			r.Code, r.Err = limit.CodeInvalid, msg
			continue
		}
		lim, blocked, blockedFor := rv.effective(cr, it.Key, now)
		if o := it.Override; o != nil && !blocked {
			lim.Rate, lim.Period, lim.Burst = o.Rate, o.Period, o.Burst
			lim.Calendar = nil // the descriptor's own unit replaces a calendar
			if lim.Burst <= 0 {
				lim.Burst = o.Rate
			}
		}
		r.Limit = lim.Capacity()
		r.Window = cr.window
		if it.Override != nil {
			r.Window = it.Override.Period.Truncate(time.Millisecond)
		}
		r.Shadow = cr.rule.Shadow
		if blocked {
			r.Allowed = false
			r.RetryAfter = blockedFor
			continue
		}
		p := v.Ring.Partition(it.Key)
		switch to := rt.Route(p, replication.Via{Forwarded: forwarded, Hops: it.Hops}); to.Do {
		case replication.Forward:
			remote = addRemote(remote, to.To, i)
			continue
		case replication.Unavailable:
			r.Code, r.Err = limit.CodeUnavailable, to.Why
			continue
		case replication.Wait:
			sc.waits = append(sc.waits, p)
		}
		group := it.Group
		if cr.rule.Shadow {
			group = 0 // shadow rules never block their group
		}
		auto := cr.auto && it.Override == nil
		var gw uint64
		if auto {
			gw = it.LeaseGateway
		}
		sc.local = append(sc.local, shard.Item{
			ID:        shard.CounterID(it.Rule, it.Key),
			Partition: p,
			Limit:     n.regionLimit(cr, it.Key, lim),
			Cost:      it.Cost,
			Refund:    it.Refund,
			Auto:      auto,
			Volatile:  cr.volatile,
			Group:     group,
			Cap:       cr.cap,
			Gateway:   gw,
			Release:   it.Release,
			Floor:     cr.floor(it.Priority, lim),
		})
		sc.idx = append(sc.idx, i)
	}

	// Partitions waiting for their counters (replication.Wait), in order.
	slices.Sort(sc.waits)
	for _, p := range slices.Compact(sc.waits) {
		select {
		case <-routes.Ready(p):
		case <-ctx.Done():
			return ctx.Err()
		case <-n.ctx.Done():
			return ErrClosed
		}
	}

	remote = sc.pin(n.handoff, &rt, v.Ring.PartitionCount(), items, res, forwarded, remote)
	defer sc.unpin(n.handoff) // on early returns; unpinned after the local decision

	// Queue the remote parts first so they travel while the local part is
	// decided, then decide locally, then collect the remote answers.
	var calls []remoteCall
	for _, dest := range sortedDests(remote) {
		idx := remote[dest]
		calls = append(calls, remoteCall{dest: dest, idx: idx, c: n.fwd.Start(ctx, dest, items, idx, rv.version, forwarded)})
	}
	if len(sc.local) > 0 {
		sc.out = slices.Grow(sc.out[:0], len(sc.local))[:len(sc.local)]
		if err := n.engine.Check(ctx, sc.local, sc.out); err != nil {
			return err
		}
		sc.unpin(n.handoff)
		for j, i := range sc.idx {
			fillResult(&res[i], sc.out[j])
			if !sc.out[j].Permit.Zero() {
				res[i].PermitExpires = sc.local[j].Limit.Period
			}
			if sc.out[j].KeyCap {
				n.keyCapped(&res[i], items[i].Rule)
			}
		}
		n.regionObserve(rv, items, sc.idx, sc.out)
	}
	for _, rc := range calls {
		if err := rc.c.Wait(ctx, res); err != nil {
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
	c    *forward.Call
}

// checkScratch holds a check's local part; reused through scratchPool (the
// engine copies what it keeps, so nothing refers to it after check).
type checkScratch struct {
	local  []shard.Item
	idx    []int
	out    []shard.Result
	parts  []uint32 // distinct partitions of the local part, ascending
	pinned []uint32 // partitions pinned for the local part
	waits  []uint32 // partitions to wait for (replication.Wait)
	seen   []uint8  // by partition: pinSeen, pinLost (reset by unpin)
}

const (
	pinSeen uint8 = 1 + iota // pinned
	pinLost                  // handed off since it was routed
)

// pin pins the partitions of the local part against a hand-off
// (replication.Handoff.Pin), in ascending order; partitions is the ring's
// partition count. The items of a partition handed off since they were
// routed go where the router says (Router.Reroute: after its counters),
// none of them decided here, so one key's rules are not split between
// this node and the new holder.
func (sc *checkScratch) pin(h *replication.Handoff, rt *replication.Router, partitions int, items []limit.Item, res []limit.Result, forwarded bool, remote map[string][]int) map[string][]int {
	if len(sc.local) == 0 {
		return remote
	}
	if len(sc.seen) < partitions {
		sc.seen = make([]uint8, partitions)
	}
	for _, it := range sc.local {
		if sc.seen[it.Partition] == 0 {
			sc.seen[it.Partition] = pinSeen
			sc.parts = append(sc.parts, it.Partition)
		}
	}
	slices.Sort(sc.parts)
	var lost []movedTo // ascending, as sc.parts
	for _, p := range sc.parts {
		ok, to := h.Pin(p)
		if ok {
			sc.pinned = append(sc.pinned, p)
			continue
		}
		sc.seen[p] = pinLost
		lost = append(lost, movedTo{p, to})
	}
	sc.parts = sc.parts[:0]
	if lost == nil {
		return remote
	}
	k := 0
	for j, it := range sc.local {
		i := sc.idx[j]
		if sc.seen[it.Partition] != pinLost {
			sc.local[k], sc.idx[k] = it, i
			k++
			continue
		}
		at, _ := slices.BinarySearchFunc(lost, it.Partition, func(m movedTo, p uint32) int { return cmp.Compare(m.p, p) })
		switch to := rt.Reroute(it.Partition, lost[at].to, replication.Via{Forwarded: forwarded, Hops: items[i].Hops}); to.Do {
		case replication.Forward:
			remote = addRemote(remote, to.To, i)
		default: // a moved partition is never decided here
			res[i].Code, res[i].Err = limit.CodeUnavailable, to.Why
		}
	}
	sc.local, sc.idx = sc.local[:k], sc.idx[:k]
	for _, m := range lost {
		sc.seen[m.p] = 0
	}
	return remote
}

// movedTo is a partition Pin found handed off, and where it went.
type movedTo struct {
	p  uint32
	to string
}

// sortedDests lists remote's destinations in order (nil for none, without
// allocating), so forwards are queued in the same order every time.
func sortedDests(remote map[string][]int) []string {
	if len(remote) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(remote))
}

// addRemote adds item i to the part of a check forwarded to dest.
func addRemote(remote map[string][]int, dest string, i int) map[string][]int {
	if remote == nil {
		remote = map[string][]int{}
	}
	remote[dest] = append(remote[dest], i)
	return remote
}

// unpin releases the partitions pin pinned.
func (sc *checkScratch) unpin(h *replication.Handoff) {
	for _, p := range sc.pinned {
		h.Unpin(p)
		sc.seen[p] = 0
	}
	sc.pinned = sc.pinned[:0]
}

// scratchPool recycles checkScratch values. It carries no state between
// calls, so nodes sharing a process do not see each other.
var scratchPool = sync.Pool{New: func() any { return new(checkScratch) }}

// maxPooledItems bounds what a pooled scratch keeps, so one huge batch does
// not pin memory.
const maxPooledItems = 4096

func (sc *checkScratch) release() {
	if cap(sc.local) > maxPooledItems {
		return
	}
	sc.local, sc.idx, sc.out, sc.parts, sc.pinned, sc.waits = sc.local[:0], sc.idx[:0], sc.out[:0], sc.parts[:0], sc.pinned[:0], sc.waits[:0]
	scratchPool.Put(sc)
}

// keyCapped answers an item the shard refused at its rule's key cap: the
// node cannot track one more key of the rule. It has a code of its own
// (CodeKeyCap), treated like an owner that cannot decide, so the rule's
// fail mode applies at the caller (the SDK: open falls back to its local share,
// closed denies). Existing keys of the rule are unaffected.
func (n *Node) keyCapped(r *limit.Result, rule string) {
	r.Allowed = false
	r.Code, r.Err = limit.CodeKeyCap, "key_cap: rule "+rule+" holds its max_keys live keys on this node"
	n.met.keyCapHits.WithLabelValues(rule).Inc()
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

// settleGroups enforces all-or-nothing across keys and nodes (the group
// contract, limit.Item.Group): when any non-shadow item of a group is
// denied, the others that were allowed give their tokens back (one more
// check, of refund items, forwarded to their owners like any other) and
// are reported voided. A shard already voids the items of a group it
// decides together, so this pass only acts across shards and nodes.
func (n *Node) settleGroups(ctx context.Context, items []limit.Item, res []limit.Result) {
	var denied map[uint32]bool
	for i := range items {
		it := &items[i]
		if it.Group == 0 || res[i].Shadow || it.Refund {
			continue
		}
		if !res[i].Allowed {
			if denied == nil {
				denied = map[uint32]bool{}
			}
			denied[it.Group] = true
		}
	}
	if len(denied) == 0 {
		return
	}
	var refunds []limit.Item
	for i := range items {
		it := &items[i]
		if !denied[it.Group] || res[i].Shadow || it.Refund {
			continue
		}
		if res[i].Allowed {
			res[i].Allowed, res[i].Voided = false, true
			if p := res[i].Permit; !p.Zero() { // a permit is given back by its id, never refunded
				refunds = append(refunds, limit.Item{Key: it.Key, Rule: it.Rule, Release: &p})
				res[i].Permit, res[i].PermitExpires = bucket.PermitID{}, 0
				continue
			}
			if c := it.Cost + res[i].LeaseGranted; c > 0 { // with an automatic lease's tokens
				refunds = append(refunds, limit.Item{Key: it.Key, Rule: it.Rule, Cost: c, Refund: true})
			}
			res[i].LeaseGranted = 0
		}
	}
	if len(refunds) > 0 {
		if err := n.check(ctx, refunds, make([]limit.Result, len(refunds)), false); err != nil {
			n.log.Warn("group refund failed", "items", len(refunds), "err", err)
		}
	}
}

// errUnavailable is the node's "cannot answer now" (no ring yet, no
// view); it is limit.ErrUnavailable, so the edges answer Unavailable / 503.
var errUnavailable = limit.Errorf(limit.ErrUnavailable, "node: unavailable")
