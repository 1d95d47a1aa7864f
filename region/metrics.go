package region

import "github.com/prometheus/client_golang/prometheus"

// Collectors are the agent's metrics, read at scrape time from Counters.
func (a *Agent) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_region_exchanges_total",
			Help: "Exchanges this node sent to peer regions."}, func() float64 { return float64(a.Counters().Exchanges) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_region_exchange_failures_total",
			Help: "Exchanges to peer regions that failed (unreachable, timeout, refused)."}, func() float64 { return float64(a.Counters().Failures) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_region_shared_keys",
			Help: "Global keys this node holds shares of."}, func() float64 { return float64(a.Counters().Keys) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_region_minority",
			Help: "1 while this node is cut off from a majority of the regions (its global keys hold their floor)."}, func() float64 {
			if a.Counters().Minority {
				return 1
			}
			return 0
		}),
	}
}
