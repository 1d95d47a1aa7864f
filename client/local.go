package client

import (
	"context"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/proto/weirv1"
)

// localState is what the client decides without the cluster: the
// blocked-until cache, the fail-open share buckets and the leases. Each
// map has its own mutex; settleOpen holds mu across a whole request.
type localState struct {
	mu    sync.Mutex // guards share
	share map[ruleKey]*shareBucket

	bmu     sync.Mutex // guards blocked
	blocked map[ruleKey]blockedEntry

	lmu    sync.Mutex // guards leases
	leases map[ruleKey]*lease
}

// ruleKey names one counter: a rule and a limited key.
type ruleKey struct{ rule, key string }

type shareBucket struct {
	st   bucket.State
	idle time.Time // full again from then on; droppable
}

type blockedEntry struct {
	at, until time.Time
	cost      int64 // the denied cost; a smaller one may pass sooner
	lim       Limit
}

// lease is a number of tokens taken from the owner and not yet spent.
type lease struct {
	tokens  int64
	expires time.Time
	lim     Limit         // the owner's answer when the lease was taken
	asking  time.Time     // automatic leases: a check asks the owner for one until then (or until endAsk)
	askDone chan struct{} // closed by endAsk; checks of the key that find an ask in flight wait on it
}

func (l *localState) init() {
	l.share = map[ruleKey]*shareBucket{}
	l.blocked = map[ruleKey]blockedEntry{}
	l.leases = map[ruleKey]*lease{}
}

// block remembers that id is denied for cost (and more) until its
// retry-after has passed.
func (l *localState) block(id ruleKey, lim Limit, cost int64, now time.Time) {
	wait := waitOf(&lim)
	if wait <= 0 {
		return
	}
	l.bmu.Lock()
	l.blocked[id] = blockedEntry{at: now, until: now.Add(wait), cost: cost, lim: lim}
	l.bmu.Unlock()
}

// blockedDecision denies at once when a non-shadow rule's key is blocked
// for this cost (rules served from a lease are not).
func (l *localState) blockedDecision(ps []pending, cost int64, now time.Time) (Decision, bool) {
	l.bmu.Lock()
	defer l.bmu.Unlock()
	if len(l.blocked) == 0 {
		return Decision{}, false
	}
	var d Decision
	for i := range ps {
		if ps[i].rule.Shadow || ps[i].leased {
			continue
		}
		e, ok := l.blocked[ps[i].id]
		if !ok || !now.Before(e.until) || cost < e.cost {
			continue
		}
		lim := e.lim
		lim.RetryAfter = e.until.Sub(now)
		lim.Reset = max(lim.RetryAfter, lim.Reset-now.Sub(e.at))
		lim.Remaining = 0
		d.Limits = append(d.Limits, lim)
	}
	if len(d.Limits) == 0 {
		return Decision{}, false
	}
	d.Status = http.StatusTooManyRequests
	for i := range d.Limits {
		if d.Policy == nil || d.Limits[i].RetryAfter > d.Policy.RetryAfter {
			d.Policy = &d.Limits[i]
		}
	}
	d.RetryAfter = d.Policy.RetryAfter
	return d, true
}

// takeLease spends cost local lease tokens for id, if it holds that many.
func (l *localState) takeLease(id ruleKey, cost int64, now time.Time) (Limit, bool) {
	lim, ok, _ := l.spend(id, cost, now)
	return lim, ok
}

// spend is takeLease that also says whether this gateway holds a lease
// entry for id at all (held: a key it was granted leases of).
func (l *localState) spend(id ruleKey, cost int64, now time.Time) (lim Limit, ok, held bool) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	ls := l.leases[id]
	if ls == nil || ls.tokens < cost || !now.Before(ls.expires) {
		return Limit{}, false, ls != nil
	}
	ls.tokens -= cost
	lim = ls.lim
	lim.Allowed, lim.Leased = true, true
	lim.Remaining = ls.lim.Remaining + ls.tokens
	return lim, true, true
}

// What claimAuto found.
type autoState uint8

const (
	autoCold    autoState = iota // no lease of the key: the check may be granted one
	autoSpent                    // served from a lease (one arrived meanwhile)
	autoClaimed                  // the check is the one asking for a grant: endAsk when answered
	autoWait                     // another check is asking: wait on the channel
)

// claimAuto, for a rule with lease: auto whose check no lease served,
// spends from a lease that arrived meanwhile, or claims the key's one ask
// for a grant (a gateway holds one grant at a time), or returns the
// channel closed when the check that holds it has its answer. A key this
// gateway holds no lease for is cold here: the owner leases only hot keys,
// so every check of it may ask.
func (l *localState) claimAuto(id ruleKey, cost int64, now time.Time, hold time.Duration) (Limit, autoState, <-chan struct{}) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	ls := l.leases[id]
	switch {
	case ls == nil:
		return Limit{}, autoCold, nil
	case ls.tokens >= cost && now.Before(ls.expires):
		ls.tokens -= cost
		lim := ls.lim
		lim.Allowed, lim.Leased = true, true
		lim.Remaining = ls.lim.Remaining + ls.tokens
		return lim, autoSpent, nil
	case now.Before(ls.asking):
		if ls.askDone == nil { // made by the first waiter only
			ls.askDone = make(chan struct{})
		}
		return Limit{}, autoWait, ls.askDone
	}
	ls.asking = now.Add(hold) // a bound should endAsk be missed
	return Limit{}, autoClaimed, nil
}

// endAsk ends the ask claimAuto claimed and wakes the checks waiting on
// it.
func (l *localState) endAsk(id ruleKey) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	if ls := l.leases[id]; ls != nil {
		if ls.askDone != nil {
			close(ls.askDone)
		}
		ls.asking, ls.askDone = time.Time{}, nil
	}
}

// returnLease gives back the cost tokens taken by takeLease for a request
// that was denied by another rule.
func (l *localState) returnLease(id ruleKey, cost int64) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	if ls := l.leases[id]; ls != nil {
		ls.tokens += cost
	}
}

// addLease stores tokens taken from the owner, merging with a lease a
// concurrent request took meanwhile.
func (l *localState) addLease(id ruleKey, tokens int64, lim Limit, expires time.Time) {
	l.lmu.Lock()
	defer l.lmu.Unlock()
	if ls := l.leases[id]; ls != nil && ls.tokens > 0 {
		ls.tokens += tokens
		ls.expires, ls.lim = expires, lim
		return
	}
	nl := &lease{tokens: tokens, expires: expires, lim: lim}
	if ls := l.leases[id]; ls != nil { // keep an ask in flight and its waiters
		nl.asking, nl.askDone = ls.asking, ls.askDone
	}
	l.leases[id] = nl
}

// leaseJanitor gives back expired leases and drops stale local entries.
func (c *Client) leaseJanitor() {
	defer c.wg.Done()
	t := time.NewTicker(max(c.cfg.LeaseTTL/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, time.Second)
		c.refundLeases(ctx, false)
		cancel()
		c.sweep(c.now())
	}
}

// refundLeases gives back the unspent tokens of expired leases (all
// leases when all is set) to their owners, best effort.
func (c *Client) refundLeases(ctx context.Context, all bool) {
	now := c.now()
	byAddr := map[string][]*weirv1.CheckItem{}
	c.local.lmu.Lock()
	for id, ls := range c.local.leases {
		if !all && now.Before(ls.expires) {
			continue
		}
		delete(c.local.leases, id)
		if ls.askDone != nil { // its asker's endAsk finds no entry
			close(ls.askDone)
		}
		if ls.tokens > 0 {
			a := c.route(id.key)
			byAddr[a] = append(byAddr[a], &weirv1.CheckItem{Key: id.key, Rule: id.rule, Cost: ls.tokens, Refund: true})
		}
	}
	c.local.lmu.Unlock()
	for addr, items := range byAddr {
		if c.noRefunds.Load() {
			break // the tokens come back by refill anyway
		}
		nc, err := c.conn(addr)
		if err != nil || !nc.allow(now) {
			continue // the tokens come back by refill anyway
		}
		seq := nc.begin()
		_, err = nc.lc.Check(ctx, &weirv1.CheckRequest{Items: items})
		refused := status.Code(err) == codes.PermissionDenied
		nc.record(seq, err == nil || refused, c.now()) // a refusal is an answer, not a sick node
		if refused {
			c.noRefunds.Store(true)
			c.cfg.Logger.Info("weir client: the cluster takes lease refunds from nodes only; unspent lease tokens come back by refill", "addr", addr)
			break
		}
		if err != nil {
			c.cfg.Logger.Debug("weir client: lease refund failed", "addr", addr, "err", err)
			continue
		}
		for _, it := range items {
			c.stats.leaseRefunds.Add(uint64(it.Cost))
		}
	}
}

// sweep drops blocked entries that have expired and share buckets that
// are full again.
func (c *Client) sweep(now time.Time) {
	c.local.bmu.Lock()
	for id, e := range c.local.blocked {
		if !now.Before(e.until) {
			delete(c.local.blocked, id)
		}
	}
	c.local.bmu.Unlock()
	c.local.mu.Lock()
	for id, e := range c.local.share {
		if !now.Before(e.idle) {
			delete(c.local.share, id)
		}
	}
	c.local.mu.Unlock()
}
