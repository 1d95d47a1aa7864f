package client

import (
	"context"
	"net/http"
	"time"
)

// beforeRules decides a request made while the client holds no rule set,
// by Config.UntilRules. Under UntilRulesWait it waits for the first set;
// when one arrives in time it returns it (rs != nil) and the caller
// decides by it. Otherwise d is the decision: allowed with no limits
// (UntilRulesAllow) or denied 503 (UntilRulesDeny, or a wait that ended
// first), its Err ErrNotReady.
func (c *Client) beforeRules(ctx context.Context) (rs *ruleState, d Decision) {
	policy := c.cfg.UntilRules
	if policy == UntilRulesWait {
		if rs = c.waitRules(ctx); rs != nil {
			c.metrics.untilRules.WithLabelValues(string(policy), "waited").Inc()
			return rs, Decision{}
		}
	}
	c.stats.untilRules.Add(1)
	if policy == UntilRulesAllow {
		c.metrics.untilRules.WithLabelValues(string(policy), "allowed").Inc()
		c.logBeforeRules(policy, "allowed with no limits")
		return nil, Decision{Allowed: true, Status: http.StatusOK, Err: ErrNotReady}
	}
	c.metrics.untilRules.WithLabelValues(string(policy), "denied").Inc()
	c.logBeforeRules(policy, "denied")
	return nil, Decision{Status: http.StatusServiceUnavailable, RetryAfter: c.cfg.ClosedRetryAfter, Err: ErrNotReady}
}

// waitRules waits for the first rule set at most UntilRulesTimeout, until
// ctx ends or the client closes; nil if none arrived.
func (c *Client) waitRules(ctx context.Context) *ruleState {
	t := c.timer(c.cfg.UntilRulesTimeout)
	defer c.stopTimer(t)
	select {
	case <-c.ready:
		return c.rules.Load()
	case <-t.C:
	case <-ctx.Done():
	case <-c.ctx.Done():
	}
	return c.rules.Load() // it may have arrived meanwhile
}

// logBeforeRules logs, at most once per second, that a decision was made
// without rules.
func (c *Client) logBeforeRules(policy UntilRules, what string) {
	if ok, n := c.waitLog.allow(c.now(), time.Second); ok {
		attrs := []any{"until_rules", policy, "suppressed", n}
		if err := c.rulesErr.Load(); err != nil {
			attrs = append(attrs, "err", *err)
		}
		c.cfg.Logger.Warn("weir client: no rule set yet; request "+what, attrs...)
	}
}

// RulesStatus describes the rule set a client holds.
type RulesStatus struct {
	// Ready is true once the client holds a rule set (Ready()).
	Ready bool
	// Version is the set's version (0 when none).
	Version uint64
	// Cached is true while the set in use is the one loaded from
	// Config.RulesCache: the cluster has sent none since New.
	Cached bool
	// Since is when the set in use was installed (zero when none).
	Since time.Time
	// Err is, while no set has come from the cluster, why the last
	// attempt to watch the cluster's rules failed (nil: none failed yet,
	// or a set arrived).
	Err error
}

// RulesStatus reports the rule set in use, where it came from and, until
// the cluster has sent one, why the rules watch is failing.
func (c *Client) RulesStatus() RulesStatus {
	var s RulesStatus
	if rs := c.rules.Load(); rs != nil {
		s.Ready, s.Version, s.Cached, s.Since = true, rs.version, rs.cached, rs.at
	}
	if err := c.rulesErr.Load(); err != nil {
		s.Err = *err
	}
	return s
}
