package client

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stats are the client's counters; Stats reads them.
type stats struct {
	rpcs, rpcErrors, batchedItems     atomic.Uint64
	breakerRejects, breakerOpens      atomic.Uint64
	fallbacks, leaseHits, blockedHits atomic.Uint64
	leaseRefunds, untilRules          atomic.Uint64
	autoLeases, autoLeaseTokens       atomic.Uint64
	releaseFailures                   atomic.Uint64
}

// Stats is a snapshot of the client's counters.
type Stats struct {
	RPCs           uint64 // Check requests sent: CheckStream messages or unary RPCs (each may carry many decisions)
	RPCErrors      uint64 // of which failed
	Items          uint64 // items carried by those requests
	BreakerRejects uint64 // decisions that skipped the cluster because a breaker was open
	BreakerOpens   uint64 // times a node's breaker opened
	Fallbacks      uint64 // rule decisions made by the fail mode
	LeaseHits      uint64 // rule decisions served from a local lease
	BlockedHits    uint64 // decisions denied by the blocked-until cache
	LeaseRefunds   uint64 // lease tokens given back to owners
	UntilRules     uint64 // decisions allowed or denied by Config.UntilRules, for want of rules
	// AutoLeases counts automatic leases the owners granted this gateway
	// (rules with lease: auto) and AutoLeaseTokens the tokens in them.
	AutoLeases      uint64
	AutoLeaseTokens uint64
	// ReleaseFailures counts releases of permits (concurrency rules) that
	// failed; those permits expire after their permit_ttl.
	ReleaseFailures uint64
}

// Stats returns the current counters.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{
		RPCs: s.rpcs.Load(), RPCErrors: s.rpcErrors.Load(), Items: s.batchedItems.Load(),
		BreakerRejects: s.breakerRejects.Load(), BreakerOpens: s.breakerOpens.Load(),
		Fallbacks: s.fallbacks.Load(), LeaseHits: s.leaseHits.Load(), BlockedHits: s.blockedHits.Load(),
		LeaseRefunds: s.leaseRefunds.Load(), UntilRules: s.untilRules.Load(),
		AutoLeases: s.autoLeases.Load(), AutoLeaseTokens: s.autoLeaseTokens.Load(),
		ReleaseFailures: s.releaseFailures.Load(),
	}
}

// metrics exports the counters on a per-client registry.
type metrics struct {
	reg        *prometheus.Registry
	fallbacks  *prometheus.CounterVec
	untilRules *prometheus.CounterVec
	cs         []prometheus.Collector
}

func newMetrics(c *Client, reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		reg: reg,
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_client_fallback_decisions_total",
			Help: "Rule decisions made by the rule's fail mode instead of the cluster.",
		}, []string{"rule", "fail_mode", "reason"}),
		untilRules: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_client_until_rules_decisions_total",
			Help: "Decisions asked before the client held a rule set, by the until-rules policy and outcome (allowed, denied, or waited: decided by the rules once they arrived).",
		}, []string{"policy", "outcome"}),
	}
	if reg == nil {
		return m, nil
	}
	counter := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	m.cs = []prometheus.Collector{
		m.fallbacks,
		m.untilRules,
		counter("weir_client_rpcs_total", "Check requests sent (CheckStream messages or unary Check RPCs).", &c.stats.rpcs),
		counter("weir_client_rpc_errors_total", "Check requests that failed.", &c.stats.rpcErrors),
		counter("weir_client_rpc_items_total", "Items carried by Check requests.", &c.stats.batchedItems),
		counter("weir_client_breaker_rejects_total", "Decisions that skipped a node whose breaker was open.", &c.stats.breakerRejects),
		counter("weir_client_breaker_opens_total", "Times a node's circuit breaker opened.", &c.stats.breakerOpens),
		counter("weir_client_lease_hits_total", "Rule decisions served from a local lease.", &c.stats.leaseHits),
		counter("weir_client_blocked_hits_total", "Decisions denied by the blocked-until cache.", &c.stats.blockedHits),
		counter("weir_client_lease_refunds_total", "Lease tokens given back to owners.", &c.stats.leaseRefunds),
		counter("weir_client_auto_leases_total", "Automatic leases granted by owners (rules with lease: auto).", &c.stats.autoLeases),
		counter("weir_client_release_failures_total", "Releases of permits (concurrency rules) that failed; the permits expire after their permit_ttl.", &c.stats.releaseFailures),
	}
	for i, col := range m.cs {
		if err := reg.Register(col); err != nil {
			for _, done := range m.cs[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, col := range m.cs {
		m.reg.Unregister(col)
	}
}

// logLimiter lets one message through per interval and counts the rest.
type logLimiter struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether to log now and how many were suppressed since.
func (l *logLimiter) allow(now time.Time, every time.Duration) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < every && now.Sub(l.last) >= 0 {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}
