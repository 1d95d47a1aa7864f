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
		c.cfg.Logger.Warn("weir client: no rule set yet; request "+what, "until_rules", policy, "suppressed", n)
	}
}
