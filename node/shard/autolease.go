package shard

import (
	"math"
	"math/bits"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/limit"
)

// Automatic leases (rules with lease: auto, Item.Auto).
//
// A shard keeps, for up to AutoLeaseKeys counters of auto rules, an
// exponentially decayed estimate of the tokens taken per second (time
// constant AutoLeaseHorizon: every item's cost, allowed or not, plus the
// tokens granted, minus the tokens given back) and the gateways that
// asked in the current and the previous horizon (one bit per gateway hash
// modulo 64). A key becomes hot when the estimate reaches AutoLeaseRate
// with AutoLeaseGateways distinct gateways or more asking, and cools when
// it falls below half that (hysteresis). Grants count as taken because a
// leased key's gateways ask once per grant instead of once per check; the
// tokens they give back unspent are taken off again, so a key whose
// gateways hold leases they do not spend cools.
//
// While a key is hot, an allowed item that names its gateway
// (Item.Gateway) is granted limit.AutoLeaseSize(capacity, gateways seen)
// tokens more, at most what the bucket still holds: they are taken from
// the counter like any decision (and replicated), so a grant never lets
// the key past its limit; the gateway spends them locally or gives them
// back. A denied item of a hot key is told to retry when a whole grant
// could be taken. Only the holder of the shard's lock touches hotKeys.

// hotKey is the rate estimate of one counter.
type hotKey struct {
	last   int64   // unix ns of the last update
	rate   float64 // tokens per second, decayed
	since  int64   // unix ns: start of the current gateway period
	gws    uint64  // a bit per gateway that asked in the current period
	prev   uint64  // and in the previous one
	hot    bool
	leased int // gateways seen when it became hot (at least; grant size)
}

type hotKeys struct {
	keys     map[uint64]hotKey // by counter id
	max      int
	rate     float64 // tokens per second to become hot
	gateways int
	horizon  int64 // ns
	leasing  int   // hot keys, as of the last sweep
}

func newHotKeys(cfg *Config) hotKeys {
	return hotKeys{
		keys:     make(map[uint64]hotKey),
		max:      cfg.AutoLeaseKeys,
		rate:     float64(cfg.AutoLeaseRate),
		gateways: cfg.AutoLeaseGateways,
		horizon:  int64(cfg.AutoLeaseHorizon),
	}
}

// add decays k's estimate to now and adds tokens (negative: given back).
func (h *hotKeys) add(k *hotKey, tokens int64, now int64) {
	if dt := now - k.last; dt > 0 {
		k.rate *= math.Exp(-float64(dt) / float64(h.horizon))
		k.last = now
	}
	k.rate = max(0, k.rate+float64(tokens)*1e9/float64(h.horizon))
	if el := now - k.since; el >= h.horizon {
		k.prev, k.gws, k.since = k.gws, 0, now
		if el >= 2*h.horizon {
			k.prev = 0 // nobody asked in the last period
		}
	}
}

// note counts cost tokens asked by gateway (0: unnamed) for counter id at
// now and returns how many gateways to share a grant among when the key
// is hot, or 0.
func (h *hotKeys) note(id uint64, cost int64, gateway uint64, now int64) int {
	k, ok := h.keys[id]
	if !ok {
		if gateway == 0 || len(h.keys) >= h.max {
			return 0 // only keys a gateway could lease are tracked
		}
		k = hotKey{last: now, since: now}
	}
	h.add(&k, cost, now)
	if gateway != 0 {
		k.gws |= 1 << (gateway % 64)
	}
	n := bits.OnesCount64(k.gws | k.prev)
	switch {
	case !k.hot && k.rate >= h.rate && n >= h.gateways:
		k.hot, k.leased = true, n
	case k.hot && k.rate < h.rate/2:
		k.hot = false
	}
	h.keys[id] = k
	if !k.hot {
		return 0
	}
	return max(k.leased, n)
}

// taken counts tokens granted (or, negative, given back) for a tracked
// counter.
func (h *hotKeys) taken(id uint64, tokens int64, now int64) {
	if k, ok := h.keys[id]; ok {
		h.add(&k, tokens, now)
		h.keys[id] = k
	}
}

// sweep forgets keys not asked for in two horizons, and cold keys taken
// at under a quarter of the threshold (so slow keys do not hold the
// places of keys that heat up later; their next check starts a fresh
// estimate), and counts the hot ones.
func (h *hotKeys) sweep(now int64) {
	h.leasing = 0
	for id, k := range h.keys {
		rate := k.rate * math.Exp(-float64(now-k.last)/float64(h.horizon))
		if now-k.last >= 2*h.horizon || (!k.hot && rate < h.rate/4) {
			delete(h.keys, id)
			continue
		}
		if k.hot {
			h.leasing++
		}
	}
}

// autoLease notes an auto rule's item and, when its key is hot and the
// item was allowed for a gateway that can hold a lease, takes the grant
// from the counter and reports it in r.
func (s *shard) autoLease(it *Item, r *Result, now int64) {
	n := s.hot.note(it.ID, it.Cost, it.Gateway, now)
	if n == 0 || it.Gateway == 0 || r.Voided || r.KeyCap {
		return
	}
	size := limit.AutoLeaseSize(it.Limit.Capacity(), n)
	if !r.Allowed {
		// Denied: say to come back when a whole grant could be given, as
		// a fixed lease's grab does (docs/gateway.md, leases): the
		// gateway's blocked-until cache then holds the key that long
		// instead of asking for every token of refill. Nothing is lost:
		// the bucket keeps the refill meanwhile.
		if w := s.waitFor(it, it.Cost+size, now); w > r.RetryAfter && r.RetryAfter > 0 {
			r.RetryAfter = w
		}
		return
	}
	g := min(size, r.Remaining)
	if g <= 0 {
		return
	}
	gi := Item{ID: it.ID, Partition: it.Partition, Limit: it.Limit, Cost: g, Cap: it.Cap}
	res := s.one(&gi, now)
	if !res.Allowed {
		return // nothing taken
	}
	r.Remaining, r.ResetAfter, r.Granted = res.Remaining, res.ResetAfter, g
	s.hot.taken(it.ID, g, now)
	s.grants.Add(1)
	s.grantTokens.Add(uint64(g))
}

// waitFor is how long until cost tokens of it's counter could be taken
// (0 if unknown: a sliding log, or more than the bucket holds).
func (s *shard) waitFor(it *Item, cost int64, now int64) time.Duration {
	if it.Limit.Algorithm == bucket.SlidingLog || it.Limit.Algorithm == bucket.Concurrency || cost > it.Limit.Capacity() {
		return 0
	}
	var st bucket.State
	if p := s.parts[it.Partition]; p != nil {
		if i := p.t.find(it.ID); i >= 0 {
			st = p.t.slots[i].s
		}
	}
	_, res := bucket.Decide(st, it.Limit, cost, now)
	if res.Allowed || res.RetryAfter < 0 {
		return 0
	}
	return res.RetryAfter
}
