package membership

import "github.com/prometheus/client_golang/prometheus"

// viewMetrics describe the published view.
type viewMetrics struct {
	members, ringVersion, partitionsOwned prometheus.Gauge
}

func newViewMetrics(reg prometheus.Registerer) viewMetrics {
	m := viewMetrics{
		members:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_members", Help: "Live members in the ring."}),
		ringVersion:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_ring_version", Help: "Ring identity: a 32-bit hash of the ring's members and config, equal on every node that agrees on the ring."}),
		partitionsOwned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_partitions_owned", Help: "Partitions this node owns."}),
	}
	if reg != nil {
		reg.MustRegister(m.members, m.ringVersion, m.partitionsOwned)
	}
	return m
}

// published sets the gauges from a view with a new ring.
func (m viewMetrics) published(v *View, self string) {
	m.members.Set(float64(len(v.Members)))
	m.ringVersion.Set(float64(v.Version))
	m.partitionsOwned.Set(float64(len(v.Ring.OwnedBy(self))))
}
