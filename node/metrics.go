package node

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// registerCounterMetrics exposes the counter parts' stats, read at scrape
// time (the ring's gauges are node/membership's, the checks' node/ops').
func registerCounterMetrics(reg *prometheus.Registry, c *counterParts) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_replication_lag_seconds", Help: "Age of the oldest counter change its replica has not acknowledged yet (acknowledgements are asked for every 100 ms, or when a stream is half full)."},
			func() float64 { return c.repl.Stats().Lag.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_replication_pending", Help: "Counter states waiting to be shipped."},
			func() float64 { return float64(c.repl.Stats().Pending) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_partitions_handed_off_total", Help: "Partitions handed to a new owner."},
			func() float64 { return float64(c.handoff.Stats().HandedOff) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_replica_states_promoted_total", Help: "Replica counter copies promoted after an owner died."},
			func() float64 { return float64(c.handoff.Stats().Promoted) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_replica_resync_states_total", Help: "Counter states sent in full to a partition's new replica."},
			func() float64 { return float64(c.handoff.Stats().Resynced) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_auto_lease_hot_keys", Help: "Keys of rules with lease: auto this node leases to gateways now (as of the last sweep)."},
			func() float64 { st, _ := c.engine.Stats(context.Background()); return float64(st.HotKeys) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_auto_leases_total", Help: "Automatic leases granted to gateways (rules with lease: auto)."},
			func() float64 { st, _ := c.engine.Stats(context.Background()); return float64(st.AutoLeases) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_auto_lease_tokens_total", Help: "Tokens taken from buckets for automatic leases."},
			func() float64 {
				st, _ := c.engine.Stats(context.Background())
				return float64(st.AutoLeaseTokens)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_replica_counters", Help: "Replica copies held for other owners."},
			func() float64 { return float64(c.replicas.Len()) }),
	)
}
