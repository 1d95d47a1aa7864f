package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/client/reqmatch"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// MaxKeyLen is the longest limited key sent to the cluster (the nodes'
// limit, limit.MaxKeyLen); a longer one has its value replaced by a hash
// (see doc.go).
const MaxKeyLen = limit.MaxKeyLen

// Limit is one rule's part of a decision.
type Limit struct {
	Rule       string
	Key        string
	Allowed    bool
	Limit      int64
	Remaining  int64
	Reset      time.Duration // until the bucket is full / the window ends
	Window     time.Duration // the rule's period
	RetryAfter time.Duration // 0 if allowed; -1 never
	Shadow     bool          // reported only; never blocks
	Fallback   bool          // decided by the fail mode, not the cluster
	Leased     bool          // served from a local lease
	// Permit, for a concurrency rule, is the permit the request holds
	// (16 bytes) until Client.Release gives it back or PermitExpires
	// passes; nil otherwise.
	Permit        []byte
	PermitExpires time.Duration
	// Shed: denied to keep the rule's reserve for other classes (the
	// request's class comes from the rule's priority_header).
	Shed bool
}

// Decision is the answer for one request.
type Decision struct {
	Allowed    bool
	Status     int // 200, 429 (over a limit), 503 (fail-closed) or 400 (a bad cost header, Err ErrInvalidCheck)
	RetryAfter time.Duration
	Limits     []Limit
	// Policy is the limit to report in headers: when denied, the denying
	// limit with the longest wait; else the one with the fewest remaining.
	// Nil when no non-shadow rule applied.
	Policy *Limit
	// Err is ErrNotReady for a decision made with no rule set held, by
	// Config.UntilRules (allowed with no limits, or denied with 503).
	Err error
	// Local is true for a decision made at the gateway without waiting
	// for the cluster: every rule served from a lease, or the request
	// denied by the blocked-until cache, and not after waiting for
	// another check's request for an automatic lease.
	Local bool
}

// pending is one matched rule while a decision is made.
type pending struct {
	rule      *rules.Rule
	key       string
	id        ruleKey // for the local maps
	lim       Limit
	done      bool
	grab      bool   // asks the owner for a lease of rule.Lease tokens
	auto      bool   // may be granted an automatic lease (lease: auto)
	claim     bool   // auto, for a key this gateway holds a lease entry of: claims the key's ask first
	asking    bool   // holds this gateway's ask for an automatic lease of the key
	leased    bool   // spent a local lease token
	closedOut bool   // denied by fail_mode closed
	open      bool   // waits for the local fail-open bucket
	class     string // the request's priority class, for a rule with a reserve
}

// Decide decides a request: it matches the rules, asks the owners (one
// coalesced RPC, all rules all-or-nothing) and applies fail modes, leases
// and the blocked-until cache. Before the client holds a rule set, it
// follows Config.UntilRules.
func (c *Client) Decide(ctx context.Context, r Request) Decision {
	rs := c.rules.Load()
	if rs == nil {
		var d Decision
		if rs, d = c.beforeRules(ctx); rs == nil {
			return d
		}
	}
	var buf [8]Check
	matched := Match(rs.m, r, buf[:0])
	if len(matched) == 0 {
		return Decision{Allowed: true, Status: http.StatusOK}
	}
	cost, err := reqmatch.Cost(matched, &r)
	if err != nil {
		return Decision{Status: http.StatusBadRequest, Err: fmt.Errorf("%w: %w", ErrInvalidCheck, err)}
	}
	var psBuf [4]pending
	ps := psBuf[:0]
	for _, m := range matched {
		p := pending{rule: m.Rule, key: m.Key, id: ruleKey{m.Rule.ID, m.Key}}
		if len(m.Rule.Reserve) > 0 {
			p.class = m.Rule.Class(r.Header.Get) // a nil Header answers ""
		}
		ps = append(ps, p)
	}
	return c.decide(ctx, rs, ps, cost)
}

// CheckKey decides cost tokens of key under the named rules, all or
// nothing, through the same path as Decide (owner routing, coalescing,
// leases, the blocked-until cache and fail modes). It is for callers that
// build their own keys (a bench, a non-HTTP service). It fails, deciding
// nothing, before the first rule set arrives (ErrNotReady), for no rule or
// an unknown rule (ErrUnknownRule), and for a key that is empty, longer
// than MaxKeyLen or not UTF-8, a cost below 1 or a rule named twice
// (ErrInvalidCheck).
func (c *Client) CheckKey(ctx context.Context, key string, cost int64, ruleIDs ...string) (Decision, error) {
	rs := c.rules.Load()
	switch {
	case rs == nil:
		return Decision{}, ErrNotReady
	case len(ruleIDs) == 0:
		return Decision{}, fmt.Errorf("%w: no rule named", ErrUnknownRule)
	}
	if err := limit.ValidateKey(key); err != nil { // the nodes' own check
		return Decision{}, fmt.Errorf("%w: %w", ErrInvalidCheck, err)
	}
	if cost < 1 {
		return Decision{}, fmt.Errorf("%w: cost must be at least 1, got %d", ErrInvalidCheck, cost)
	}
	var psBuf [4]pending
	ps := psBuf[:0]
	for i, id := range ruleIDs {
		rule, ok := rs.m.Rule(id)
		if !ok {
			return Decision{}, fmt.Errorf("%w: %q", ErrUnknownRule, id)
		}
		for _, prev := range ruleIDs[:i] {
			if prev == id { // would take cost twice from one bucket
				return Decision{}, fmt.Errorf("%w: rule %q named twice", ErrInvalidCheck, id)
			}
		}
		ps = append(ps, pending{rule: rule, key: key, id: ruleKey{rule.ID, key}})
	}
	return c.decide(ctx, rs, ps, cost), nil
}

// decide runs the pending rules through leases, the blocked-until cache,
// the cluster and the fail modes. A lease serves a cost up to its size: a
// grab takes rule.Lease tokens, spends cost of them and keeps the rest.
func (c *Client) decide(ctx context.Context, rs *ruleState, ps []pending, cost int64) Decision {
	now := c.now()
	// Lease tokens were taken from the owner already, so they are spent
	// first: a key the owner denied stays usable here while this gateway
	// holds tokens for it. The blocked-until cache covers the rest.
	claims := false
	for i := range ps {
		p := &ps[i]
		if p.rule.Shadow {
			continue
		}
		var lim Limit
		var ok bool
		switch n := p.rule.Lease.Fixed(); {
		case p.rule.HoldsPermits(): // a permit is the owner's alone: never leased
		case !p.rule.Leasable():
			// A long window (a calendar window, a period of an hour or
			// more) is never leased, fixed or automatic: leased tokens
			// would come back only when it ends (rules.Rule.Leasable).
		case n > 0 && cost <= n:
			if lim, ok = c.local.takeLease(p.id, cost, now); !ok {
				p.grab = true
			}
		case p.rule.Lease == rules.LeaseAuto:
			var held bool
			lim, ok, held = c.local.spend(p.id, cost, now)
			p.auto = !ok
			p.claim = !ok && held // a cold key (no lease held) may always ask
			claims = claims || p.claim
		}
		if ok {
			c.leased(p, lim)
		}
	}
	d, blocked := c.local.blockedDecision(ps, cost, now)
	asking, waited := false, false
	if !blocked && claims {
		asking, waited = c.prepareAuto(ctx, ps, cost, &now)
		if waited { // the ask waited for may have blocked the key
			d, blocked = c.local.blockedDecision(ps, cost, now)
		}
	}
	local := blocked
	if blocked {
		c.stats.blockedHits.Add(1)
	} else {
		local = allDone(ps)
		c.ask(ctx, rs, ps, cost, now)
		d = combine(ps)
	}
	d.Local = local && !waited
	if !d.Allowed {
		for i := range ps { // a denied request spends no lease token
			if ps[i].leased {
				c.local.returnLease(ps[i].id, cost)
			}
		}
	}
	if asking {
		for i := range ps {
			if ps[i].asking {
				c.local.endAsk(ps[i].id)
			}
		}
	}
	c.report.note(rs, ps, &d, blocked, now)
	return d
}

// leased records that p was served from a local lease.
func (c *Client) leased(p *pending, lim Limit) {
	p.lim, p.done, p.leased = lim, true, true
	p.lim.Rule, p.lim.Key = p.rule.ID, p.key
	c.stats.leaseHits.Add(1)
}

// prepareAuto readies the auto-lease rules going to the owner: a check
// may be granted a lease of a key this gateway holds none of (p.auto
// stays set), and of one it holds (a hot key) only as the one check
// asking for it (p.asking: endAsk when answered). When another check of
// the key is asking, it waits for that answer (at most the rule's
// timeout), then spends from the grant or finds the key blocked, rather
// than taking single tokens from under the grant; not while the request
// holds an ask of its own (two requests could wait on each other). It
// reports whether any ask is held and whether it waited (*now is then
// renewed).
func (c *Client) prepareAuto(ctx context.Context, ps []pending, cost int64, now *time.Time) (asking, waited bool) {
	for i := range ps {
		p := &ps[i]
		if !p.claim || p.done {
			continue
		}
		lim, st, wait := c.local.claimAuto(p.id, cost, *now, c.cfg.LeaseTTL)
		if st == autoWait && !asking && c.waitAsk(ctx, wait, p.rule.Timeout.D()) {
			waited, *now = true, c.now()
			lim, st, _ = c.local.claimAuto(p.id, cost, *now, c.cfg.LeaseTTL)
		}
		switch st {
		case autoSpent:
			p.auto = false
			c.leased(p, lim)
		case autoClaimed:
			p.asking, asking = true, true
		case autoWait:
			p.auto = false // ask for cost only
		}
	}
	return asking, waited
}

// waitAsk waits for another check's ask for an automatic lease to be
// answered, at most timeout (the rules' default when 0); false if it was
// not.
func (c *Client) waitAsk(ctx context.Context, done <-chan struct{}, timeout time.Duration) bool {
	if timeout <= 0 {
		timeout = rules.DefaultTimeout
	}
	t := c.timer(timeout)
	defer c.stopTimer(t)
	select {
	case <-done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// ask sends the undecided rules to the cluster and fills in their answers,
// using the fail modes when the cluster does not answer.
func (c *Client) ask(ctx context.Context, rs *ruleState, ps []pending, cost int64, now time.Time) {
	for round := 0; round < 2; round++ {
		cl := c.newCall()
		var whereBuf [8]int
		where := whereBuf[:0]
		var timeout time.Duration
		g := c.group.Add(1)
		if g == 0 {
			g = c.group.Add(1)
		}
		for i := range ps {
			p := &ps[i]
			if p.done {
				continue
			}
			n := cost
			if p.grab {
				n = p.rule.Lease.Fixed()
			}
			var gw uint64
			if p.auto {
				gw = c.gatewayHash
			}
			cl.add(p.key, p.rule.ID, n, g, rs.version, gw)
			if p.class != "" {
				cl.items[len(cl.items)-1].Priority = p.class
			}
			where = append(where, i)
			timeout = max(timeout, p.rule.Timeout.D())
		}
		if len(cl.items) == 0 {
			c.putCall(cl)
			return
		}
		if timeout <= 0 {
			timeout = rules.DefaultTimeout
		}
		var span trace.Span
		if c.tracer != nil {
			span = c.traceSend(ctx, cl)
		}
		res, err := c.send(ctx, cl, timeout, now)
		if span != nil {
			span.End()
		}
		if err != nil {
			reason := "unavailable"
			switch {
			case errors.Is(err, errBreakerOpen):
				reason = "breaker_open"
			case errors.Is(err, context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded:
				reason = "timeout"
			}
			for _, i := range where {
				c.fallback(rs, &ps[i], reason, now)
			}
			c.settleOpen(rs, ps, cost, now)
			return
		}
		// A lease grab denied while some tokens are left: ask again for
		// single tokens (the node undid the group). Denied with none left,
		// the answer's retry-after is the wait for a whole lease, and the
		// blocked-until cache holds the key that long: a hot key over its
		// limit then costs the owner one check per gateway per lease's
		// worth of refill, not one per request. No token is lost meanwhile
		// (a lease is at most the burst, so the bucket keeps the refill).
		regrab := false
		for j, i := range where {
			p, x := &ps[i], res[j]
			if p.grab && !x.GetAllowed() && x.GetErrorCode() == 0 && x.GetRemaining() >= cost {
				p.grab, regrab = false, true
			}
		}
		if regrab && round == 0 {
			continue
		}
		for j, i := range where {
			c.answer(rs, &ps[i], res[j], cost, now)
		}
		c.settleOpen(rs, ps, cost, now)
		return
	}
}

// newCall takes an empty call from the client's pool.
func (c *Client) newCall() *call {
	if cl, _ := c.calls.Get().(*call); cl != nil {
		return cl
	}
	cl := &call{done: make(chan callResult, 1)}
	cl.items = cl.ptrs[:0]
	return cl
}

// send hands cl to the owner of its first item's key and waits for the
// answer at most timeout. cl goes back to the pool when it is certain
// nobody touches it again: not sent, or answered (the sender's last touch
// is the answer); a call given up on is left to the garbage collector.
func (c *Client) send(ctx context.Context, cl *call, timeout time.Duration, now time.Time) ([]*weirv1.CheckResult, error) {
	if c.closed.Load() {
		c.putCall(cl)
		return nil, ErrClosed
	}
	nc, err := c.conn(c.route(cl.items[0].Key))
	if err != nil {
		c.putCall(cl)
		return nil, err
	}
	if !nc.allow(now) {
		c.putCall(cl)
		c.stats.breakerRejects.Add(1)
		return nil, errBreakerOpen
	}
	cl.deadline, cl.timeout = now.Add(timeout), timeout
	if r, ok := nc.direct(cl); ok {
		c.putCall(cl)
		return r.res, r.err
	}
	if err := nc.enqueue(cl); err != nil {
		c.putCall(cl)
		return nil, err
	}
	t := c.timer(timeout)
	defer c.stopTimer(t)
	select {
	case r := <-cl.done:
		c.putCall(cl)
		return r.res, r.err
	case <-t.C:
		return nil, context.DeadlineExceeded
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// putCall empties cl and pools it.
func (c *Client) putCall(cl *call) {
	clear(cl.ptrs[:])
	cl.items = cl.ptrs[:0]
	c.calls.Put(cl)
}

// timer returns a pooled timer set to fire after d.
func (c *Client) timer(d time.Duration) *time.Timer {
	if t, _ := c.timers.Get().(*time.Timer); t != nil {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// stopTimer stops t and pools it; since Go 1.23 a stopped timer's channel
// delivers nothing stale after Reset.
func (c *Client) stopTimer(t *time.Timer) {
	t.Stop()
	c.timers.Put(t)
}

// answer records the cluster's verdict for one rule.
func (c *Client) answer(rs *ruleState, p *pending, x *weirv1.CheckResult, cost int64, now time.Time) {
	if x.GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
		c.fallback(rs, p, strings.ToLower(strings.TrimPrefix(x.GetErrorCode().String(), "ERROR_CODE_")), now)
		return
	}
	p.done = true
	p.lim = Limit{
		Rule: p.rule.ID, Key: p.key, Allowed: x.GetAllowed(), Limit: x.GetLimit(), Remaining: x.GetRemaining(),
		Reset: ms(x.GetResetMs()), Window: ms(x.GetWindowMs()), RetryAfter: ms(x.GetRetryAfterMs()),
		Shadow: p.rule.Shadow || x.GetShadow(), Shed: x.GetShed(),
	}
	if p.lim.Window == 0 {
		p.lim.Window = p.rule.Window()
	}
	if x.GetVoided() {
		// Voided: it would have passed, but another rule of the request
		// was denied (the group contract, CheckResult.voided). This rule
		// itself passed, so it neither blocks the key nor grants a lease.
		p.lim.Allowed = true
		return
	}
	if p.lim.Shadow {
		return
	}
	if p.rule.HoldsPermits() {
		// Never cached as blocked: a release may free a permit long
		// before the retry-after (the first permit's expiry).
		if p.lim.Allowed {
			p.lim.Permit, p.lim.PermitExpires = bytes.Clone(x.GetPermit()), ms(x.GetPermitExpiresMs())
		}
		return
	}
	if !p.lim.Allowed {
		if !p.lim.Shed { // shed is for this class only: never cached for the key
			c.local.block(p.id, p.lim, cost, now)
		}
		return
	}
	if p.grab && p.rule.Lease.Fixed() > cost {
		c.local.addLease(p.id, p.rule.Lease.Fixed()-cost, p.lim, now.Add(c.cfg.LeaseTTL))
	}
	if g := x.GetLeaseGranted(); g > 0 && p.auto {
		c.local.addLease(p.id, g, p.lim, now.Add(c.cfg.LeaseTTL))
		c.stats.autoLeases.Add(1)
		c.stats.autoLeaseTokens.Add(uint64(g))
	}
}

func ms(v int64) time.Duration {
	if v < 0 {
		return -1
	}
	return time.Duration(v) * time.Millisecond
}

// fallback applies the rule's fail mode; open rules are settled together
// by settleOpen.
func (c *Client) fallback(rs *ruleState, p *pending, reason string, now time.Time) {
	p.done = true
	p.lim = Limit{Rule: p.rule.ID, Key: p.key, Window: p.rule.Window(), Shadow: p.rule.Shadow, Fallback: true}
	c.stats.fallbacks.Add(1)
	c.metrics.fallbacks.WithLabelValues(p.rule.ID, p.rule.FailMode, reason).Inc()
	if ok, n := c.logLim.allow(now, time.Second); ok {
		c.cfg.Logger.Warn("weir client: cluster did not decide; using the fail mode",
			"rule", p.rule.ID, "fail_mode", p.rule.FailMode, "reason", reason, "suppressed", n)
	}
	switch {
	case p.rule.Shadow:
		p.lim.Allowed = true
	case p.rule.FailMode == rules.FailClosed:
		p.lim.RetryAfter = c.cfg.ClosedRetryAfter
		p.closedOut = true
	default:
		p.open = true
		p.lim.Limit, _ = c.shareLimit(rs, p, now)
	}
}

// shareLimit is this gateway's share of the rule's limit for the key:
// rate and burst divided by the number of live gateways (at least 1).
func (c *Client) shareLimit(rs *ruleState, p *pending, now time.Time) (int64, bucket.Limit) {
	var o *rules.Override
	if ov, ok := rs.set.Override(p.rule.ID, p.key); ok && ov.Active(now) {
		o = &ov
	}
	lim, blocked := rules.Effective(p.rule, o)
	if blocked {
		lim.Rate = 0
	}
	g := int64(c.Gateways())
	lim.Rate = lim.Rate / g
	if lim.Rate < 1 && !blocked && lim.Burst > 0 {
		lim.Rate = 1
	}
	lim.Burst = max(1, lim.Burst/g)
	if lim.Algorithm == bucket.SlidingLog {
		lim.Algorithm = bucket.SlidingWindow
	}
	return lim.Capacity(), lim
}

// settleOpen decides the fail-open rules on the local share buckets, all
// or nothing.
func (c *Client) settleOpen(rs *ruleState, ps []pending, cost int64, now time.Time) {
	n := 0
	for i := range ps {
		if ps[i].open {
			n++
		}
	}
	if n == 0 {
		return
	}
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	ok := true
	for i := range ps {
		p := &ps[i]
		if !p.open {
			continue
		}
		if p.rule.HoldsPermits() { // fail open: admitted, holding no permit
			p.lim.Allowed = true
			continue
		}
		_, lim := c.shareLimit(rs, p, now)
		e := c.local.share[p.id]
		if e == nil {
			e = &shareBucket{}
			c.local.share[p.id] = e
		}
		var r bucket.Result
		e.st, r = bucket.Decide(e.st, lim, cost, now.UnixNano())
		e.idle = now.Add(lim.IdleAfter())
		p.lim.Allowed, p.lim.Limit, p.lim.Remaining = r.Allowed, r.Limit, r.Remaining
		p.lim.Reset, p.lim.RetryAfter = r.ResetAfter, r.RetryAfter
		ok = ok && r.Allowed
	}
	for i := range ps {
		p := &ps[i]
		if !p.open {
			continue
		}
		p.open = false
		if !ok && p.lim.Allowed && !p.rule.HoldsPermits() { // give back what the others' denial voids
			_, lim := c.shareLimit(rs, p, now)
			e := c.local.share[p.id]
			e.st = bucket.Refund(e.st, lim, cost, now.UnixNano())
		}
	}
}

// allDone reports whether every pending rule is decided already (from a
// lease), so that ask sends nothing.
func allDone(ps []pending) bool {
	for i := range ps {
		if !ps[i].done {
			return false
		}
	}
	return true
}

// combine turns the per-rule answers into the request's decision.
func combine(ps []pending) Decision {
	d := Decision{Allowed: true, Status: http.StatusOK, Limits: make([]Limit, len(ps))}
	limited, closed, shed := false, false, false
	for i := range ps {
		d.Limits[i] = ps[i].lim
		l := &d.Limits[i]
		if l.Shadow {
			l.Allowed = l.Allowed || l.Fallback
			continue
		}
		if !l.Allowed {
			d.Allowed = false
			switch {
			case ps[i].closedOut:
				closed = true
			case l.Shed:
				shed = true
			default:
				limited = true
			}
		}
	}
	var pol *Limit
	for i := range d.Limits {
		l := &d.Limits[i]
		if l.Shadow {
			continue
		}
		switch {
		case pol == nil:
			pol = l
		case !d.Allowed:
			if !l.Allowed && (pol.Allowed || waitOf(l) > waitOf(pol)) {
				pol = l
			}
		case l.Remaining < pol.Remaining || (l.Remaining == pol.Remaining && l.Limit < pol.Limit):
			pol = l
		}
	}
	d.Policy = pol
	if !d.Allowed {
		d.Status = http.StatusTooManyRequests
		if (closed || shed) && !limited {
			d.Status = http.StatusServiceUnavailable
		}
		if shed && !limited {
			d.Err = ErrShed
		}
		for i := range d.Limits {
			if l := &d.Limits[i]; !l.Shadow && !l.Allowed {
				d.RetryAfter = max(d.RetryAfter, waitOf(l))
			}
		}
	}
	return d
}

// waitOf is how long a denied limit says to wait; a limit that can never
// pass (a block, a cost above the burst) says one window, at least 1s.
func waitOf(l *Limit) time.Duration {
	if l.RetryAfter < 0 {
		return max(l.Window, time.Second)
	}
	return l.RetryAfter
}
