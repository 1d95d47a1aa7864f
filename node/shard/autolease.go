package shard

import (
	"math/bits"

	"github.com/weirlimit/weir/limit"
)

// Automatic leases (rules with lease: auto, Item.Auto).
//
// A shard keeps, for up to AutoLeaseKeys counters of auto rules, a rate
// estimate renewed every AutoLeaseWindow: the tokens asked in the window
// (every item's cost, allowed or not, plus the tokens granted) and the
// gateways that asked (one bit per gateway hash modulo 64). At the end of
// a window a key becomes hot when it was asked for at AutoLeaseRate tokens
// per second or more by AutoLeaseGateways distinct gateways or more, and
// cools when the rate falls below half that (hysteresis: a leased key
// asks less often, in bigger pieces, so its checks drop but its tokens do
// not). While a key is hot, an allowed item that names its gateway
// (Item.Gateway) is granted limit.AutoLeaseSize(capacity, gateways seen)
// tokens more, at most what the bucket still holds: they are taken from
// the counter like any decision (and replicated), so a grant never lets
// the key past its limit; the gateway spends them locally or gives them
// back. Only the shard goroutine touches hotKeys.

// hotKey is the rate estimate of one counter.
type hotKey struct {
	start int64  // unix ns: start of the current window
	asked int64  // tokens asked in the current window
	gws   uint64 // a bit per gateway that asked in the current window
	n     int    // gateways seen in the last window (grant size)
	hot   bool
}

type hotKeys struct {
	keys     map[uint64]hotKey // by counter id
	max      int
	rate     int64 // tokens per second to become hot
	gateways int
	window   int64 // ns
	leasing  int   // hot keys, as of the last sweep
}

func newHotKeys(cfg *Config) hotKeys {
	return hotKeys{
		keys:     make(map[uint64]hotKey),
		max:      cfg.AutoLeaseKeys,
		rate:     cfg.AutoLeaseRate,
		gateways: cfg.AutoLeaseGateways,
		window:   int64(cfg.AutoLeaseWindow),
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
		k.start = now
	}
	if el := now - k.start; el >= h.window {
		rate := float64(k.asked) * 1e9 / float64(el)
		n := bits.OnesCount64(k.gws)
		switch {
		case !k.hot && rate >= float64(h.rate) && n >= h.gateways:
			k.hot = true
		case k.hot && rate < float64(h.rate)/2:
			k.hot = false
		}
		k.n = max(k.n, n) // a leased gateway may skip a window
		if !k.hot {
			k.n = n
		}
		k.start, k.asked, k.gws = now, 0, 0
	}
	k.asked += cost
	if gateway != 0 {
		k.gws |= 1 << (gateway % 64)
	}
	h.keys[id] = k
	if !k.hot {
		return 0
	}
	return max(k.n, bits.OnesCount64(k.gws))
}

// granted counts a grant's tokens as asked.
func (h *hotKeys) granted(id uint64, tokens int64) {
	if k, ok := h.keys[id]; ok {
		k.asked += tokens
		h.keys[id] = k
	}
}

// sweep forgets keys not asked for in the last two windows (their next
// check starts a fresh estimate, cold) and counts the hot ones.
func (h *hotKeys) sweep(now int64) {
	h.leasing = 0
	for id, k := range h.keys {
		if now-k.start >= 2*h.window {
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
	if n == 0 || it.Gateway == 0 || !r.Allowed || r.Voided || r.KeyCap {
		return
	}
	g := min(limit.AutoLeaseSize(it.Limit.Capacity(), n), r.Remaining)
	if g <= 0 {
		return
	}
	gi := Item{ID: it.ID, Partition: it.Partition, Limit: it.Limit, Cost: g, Cap: it.Cap}
	res := s.one(&gi, now)
	if !res.Allowed {
		return // nothing taken
	}
	r.Remaining, r.ResetAfter, r.Granted = res.Remaining, res.ResetAfter, g
	s.hot.granted(it.ID, g)
	s.grants.Add(1)
	s.grantTokens.Add(uint64(g))
}
