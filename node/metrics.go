package node

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are per node, registered on the registry passed in Config:
// those of the ring and the key cap (the checks' and the Raft group's are
// node/ops', the forwarders' node/forward's).
type metrics struct {
	members         prometheus.Gauge
	ringVersion     prometheus.Gauge
	partitionsOwned prometheus.Gauge
	keyCapHits      *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		members:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_members", Help: "Live members in the ring."}),
		ringVersion:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_ring_version", Help: "Ring identity: a 32-bit hash of the ring's members and config, equal on every node that agrees on the ring."}),
		partitionsOwned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_partitions_owned", Help: "Partitions this node owns."}),
		keyCapHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_shard_key_cap_hits_total", Help: "Checks for a new key refused because its rule holds max_keys live keys on this node.",
		}, []string{"rule"}),
	}
	reg.MustRegister(m.members, m.ringVersion, m.partitionsOwned, m.keyCapHits)
	return m
}

// registerFuncs exposes values owned elsewhere, read at scrape time.
func (m *metrics) registerFuncs(reg *prometheus.Registry, n *Node) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_replication_lag_seconds", Help: "Age of the oldest counter change its replica has not acknowledged yet (acknowledgements are asked for every 25 ms)."},
			func() float64 { return n.repl.Stats().Lag.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_replication_pending", Help: "Counter states waiting to be shipped."},
			func() float64 { return float64(n.repl.Stats().Pending) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_partitions_handed_off_total", Help: "Partitions handed to a new owner."},
			func() float64 { return float64(n.handoff.Stats().HandedOff) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_replica_states_promoted_total", Help: "Replica counter copies promoted after an owner died."},
			func() float64 { return float64(n.handoff.Stats().Promoted) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_replica_resync_states_total", Help: "Counter states sent in full to a partition's new replica."},
			func() float64 { return float64(n.handoff.Stats().Resynced) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_auto_lease_hot_keys", Help: "Keys of rules with lease: auto this node leases to gateways now (as of the last sweep)."},
			func() float64 { st, _ := n.engine.Stats(context.Background()); return float64(st.HotKeys) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_auto_leases_total", Help: "Automatic leases granted to gateways (rules with lease: auto)."},
			func() float64 { st, _ := n.engine.Stats(context.Background()); return float64(st.AutoLeases) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_auto_lease_tokens_total", Help: "Tokens taken from buckets for automatic leases."},
			func() float64 { st, _ := n.engine.Stats(context.Background()); return float64(st.AutoLeaseTokens) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_replica_counters", Help: "Replica copies held for other owners."},
			func() float64 { return float64(n.replicas.Len()) }),
	)
}
