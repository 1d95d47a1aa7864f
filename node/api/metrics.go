package api

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one Server's Prometheus collectors.
type metrics struct {
	httpRequests *prometheus.CounterVec // route, code
	ruleWrites   *prometheus.CounterVec // op, result
}

// Rule write results (the "result" label).
const (
	writeOK        = "ok"
	writeForwarded = "forwarded"
	writeError     = "error"
)

func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "weir", Subsystem: "api", Name: "http_requests_total",
			Help: "HTTP API requests by route pattern and status code.",
		}, []string{"route", "code"}),
		ruleWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "weir", Subsystem: "api", Name: "rule_writes_total",
			Help: "Rule and override writes by operation and result (ok: applied here, forwarded: sent to the leader, error).",
		}, []string{"op", "result"}),
	}
	for _, c := range []prometheus.Collector{m.httpRequests, m.ruleWrites} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register: %w", err)
		}
	}
	return m, nil
}
