package client

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// Gateway-side decisions (a lease token spent, the blocked-until cache, a
// fail mode) never reach an owner, so the nodes would not count them. The
// reporter sums them per rule and, every Config.ReportInterval, sends one
// Ops.Report to a node, which counts them in weir_checks_total and
// weir_gateway_decisions_total and keeps the sampled events: so a rule's
// 429 rate, its events and the dashboard include them. Recording is a
// branch per rule decision when nothing local happened, and one short
// lock when something did.

// reportTimeout is the least time a report may take (dial included).
const reportTimeout = 2 * time.Second

// maxReportEvents bounds the events one report carries; more in one
// interval are dropped (the counts stay exact).
const maxReportEvents = 100

type reporter struct {
	mu     sync.Mutex
	counts map[string]*weirv1.GatewayRuleCounts // by rule
	events []*weirv1.LimitEvent
}

// note records the gateway-side decisions of one request.
func (r *reporter) note(rs *ruleState, ps []pending, d *Decision, blocked bool, now time.Time) {
	if blocked {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := range d.Limits {
			l := &d.Limits[i]
			r.count(l.Rule).LocalDenied++
			if rule, ok := rs.m.Rule(l.Rule); ok && sampled(rule) {
				r.event(now, rs, l.Rule, l.Key, "denied", 0)
			}
		}
		return
	}
	for i := range ps {
		p := &ps[i]
		if !(p.leased && d.Allowed) && !(p.lim.Fallback && !p.rule.Shadow) {
			continue
		}
		r.mu.Lock()
		c := r.count(p.rule.ID)
		switch {
		case p.leased:
			c.LocalAllowed++
		case p.rule.FailMode == rules.FailClosed:
			c.FailClosed++
			r.event(now, rs, p.rule.ID, p.key, "denied", 0)
		case p.lim.Allowed:
			c.FailOpen++
			r.event(now, rs, p.rule.ID, p.key, "allowed", p.lim.Remaining)
		default: // the fail-open share bucket is empty
			c.LocalDenied++
			r.event(now, rs, p.rule.ID, p.key, "denied", 0)
		}
		r.mu.Unlock()
	}
}

func sampled(r *rules.Rule) bool {
	rate := r.Events.SampleRate()
	return rate >= 1 || rand.Float64() < rate
}

// count returns rule's counts (mu held).
func (r *reporter) count(rule string) *weirv1.GatewayRuleCounts {
	c := r.counts[rule]
	if c == nil {
		if r.counts == nil {
			r.counts = map[string]*weirv1.GatewayRuleCounts{}
		}
		c = &weirv1.GatewayRuleCounts{Rule: rule}
		r.counts[rule] = c
	}
	return c
}

// event keeps one event (mu held), up to maxReportEvents per interval.
func (r *reporter) event(now time.Time, rs *ruleState, rule, key, decision string, remaining int64) {
	if len(r.events) >= maxReportEvents {
		return
	}
	r.events = append(r.events, &weirv1.LimitEvent{TimeUnixMs: now.UnixMilli(), Rule: rule, RuleVersion: rs.version,
		Key: key, Decision: decision, Remaining: remaining})
}

// take returns the report so far and starts a new one. An empty report
// still tells the node the gateway is there (the dashboard lists it).
func (r *reporter) take(gateway string) *weirv1.GatewayReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &weirv1.GatewayReport{GatewayId: gateway, Events: r.events}
	for _, c := range r.counts {
		rep.Counts = append(rep.Counts, c)
	}
	r.counts, r.events = nil, nil
	return rep
}

// pending reports whether anything was counted since the last report.
func (r *reporter) pending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.counts) > 0 || len(r.events) > 0
}

// putBack merges a report that could not be sent into the next one (its
// events too, as long as they fit in maxReportEvents).
func (r *reporter) putBack(rep *weirv1.GatewayReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if room := maxReportEvents - len(r.events); room > 0 {
		r.events = append(rep.Events[:min(room, len(rep.Events)):min(room, len(rep.Events))], r.events...)
	}
	for _, c := range rep.Counts {
		n := r.count(c.Rule)
		n.LocalAllowed += c.LocalAllowed
		n.LocalDenied += c.LocalDenied
		n.FailOpen += c.FailOpen
		n.FailClosed += c.FailClosed
	}
}

// reportLoop sends the report every ReportInterval to a node (the
// members in turn), and once more on Close (if it holds anything).
func (c *Client) reportLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			if c.report.pending() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				c.sendReport(ctx)
				cancel()
			}
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(c.ctx, max(c.cfg.ReportInterval, reportTimeout))
			c.sendReport(ctx)
			cancel()
		}
	}
}

func (c *Client) sendReport(ctx context.Context) {
	rep := c.report.take(c.cfg.GatewayID)
	addrs := c.addrs()
	addr := addrs[int(c.next.Add(1))%len(addrs)]
	cc, err := c.dial(addr) // its own short-lived connection: Close may be under way
	if err == nil {
		_, err = weirv1.NewOpsClient(cc).Report(ctx, rep)
		_ = cc.Close()
	}
	if err != nil {
		c.report.putBack(rep)
		if ok, n := c.logLim.allow(c.now(), time.Second); ok {
			c.cfg.Logger.Warn("weir client: gateway report not delivered; its counts go with the next", "node", addr, "err", err, "suppressed", n)
		}
	}
}
