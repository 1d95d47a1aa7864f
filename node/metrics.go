package node

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirlimit/weir/limit"
)

// metrics are per node, registered on the registry passed in Config.
type metrics struct {
	checks          *prometheus.CounterVec
	latency         prometheus.Histogram
	members         prometheus.Gauge
	ringVersion     prometheus.Gauge
	partitionsOwned prometheus.Gauge
	keyCapHits      *prometheus.CounterVec

	checkChildren sync.Map // rule id → *[nDecisions]prometheus.Counter of checks
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_checks_total", Help: "Checks by rule and decision (allowed, denied, error, voided: would have passed, but another rule of its group denied).",
		}, []string{"rule", "decision"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "weir_check_seconds", Help: "Time to answer a Check batch on the entry node.",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3},
		}),
		members:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_members", Help: "Live members in the ring."}),
		ringVersion:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_ring_version", Help: "Ring identity: a 32-bit hash of the ring's members and config, equal on every node that agrees on the ring."}),
		partitionsOwned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_partitions_owned", Help: "Partitions this node owns."}),
		keyCapHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_shard_key_cap_hits_total", Help: "Checks for a new key refused because its rule holds max_keys live keys on this node.",
		}, []string{"rule"}),
	}
	reg.MustRegister(m.checks, m.latency, m.members, m.ringVersion, m.partitionsOwned, m.keyCapHits)
	return m
}

// invalidRuleLabel is the rule label of items that named an unknown rule
// or were malformed.
const invalidRuleLabel = "(invalid)"

// Decisions, the "decision" label of weir_checks_total, as indexes.
const (
	decAllowed = iota
	decDenied
	decError
	decVoided // a group member another item's denial voided: not denied by this rule
	nDecisions
)

var decisionNames = [nDecisions]string{"allowed", "denied", "error", "voided"}

// checkCounters returns rule's weir_checks_total children, by decision,
// cached so the check path does not hash label values per item.
func (m *metrics) checkCounters(rule string) *[nDecisions]prometheus.Counter {
	if c, ok := m.checkChildren.Load(rule); ok {
		return c.(*[nDecisions]prometheus.Counter)
	}
	var c [nDecisions]prometheus.Counter
	for d, name := range decisionNames {
		c[d] = m.checks.WithLabelValues(rule, name)
	}
	got, _ := m.checkChildren.LoadOrStore(rule, &c)
	return got.(*[nDecisions]prometheus.Counter)
}

// observeChecks counts a batch's decisions by rule (one counter update per
// run of items with the same rule and decision) and its latency.
func (m *metrics) observeChecks(items []limit.Item, res []limit.Result, d time.Duration) {
	m.latency.Observe(d.Seconds())
	var (
		rule   string
		counts [nDecisions]int
		have   bool
	)
	flush := func() {
		if !have {
			return
		}
		c := m.checkCounters(rule)
		for dec, k := range counts {
			if k > 0 {
				c[dec].Add(float64(k))
			}
		}
		counts, have = [nDecisions]int{}, false
	}
	for i := range res {
		r := &res[i]
		label := items[i].Rule
		if r.Code == limit.CodeUnknownRule || r.Code == limit.CodeInvalid {
			label = invalidRuleLabel // a caller's bad names must not grow the metric
		}
		if have && label != rule {
			flush()
		}
		rule, have = label, true
		switch {
		case r.Code != limit.CodeNone:
			counts[decError]++
		case r.Allowed:
			counts[decAllowed]++
		case r.Voided:
			counts[decVoided]++
		default:
			counts[decDenied]++
		}
	}
	flush()
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
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_raft_leader", Help: "1 when this node is the Raft leader."},
			func() float64 {
				if n.store.IsLeader() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_raft_last_index", Help: "Last index of this node's Raft log."},
			func() float64 { last, _ := n.store.Indexes(); return float64(last) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_raft_applied_index", Help: "Last Raft index applied to this node's rules (the rules version it serves)."},
			func() float64 { _, applied := n.store.Indexes(); return float64(applied) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_raft_last_contact_seconds", Help: "Seconds since this node last heard from the Raft leader (0 on the leader or before any contact)."},
			func() float64 {
				if t := n.store.LastContact(); !t.IsZero() && !n.store.IsLeader() {
					return time.Since(t).Seconds()
				}
				return 0
			}),
	)
	for _, st := range raftStates {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "weir_raft_state", Help: "1 for this node's current Raft state.", ConstLabels: prometheus.Labels{"state": st},
		}, func() float64 {
			if n.store.State() == st {
				return 1
			}
			return 0
		}))
	}
}

// raftStates are the values of weir_raft_state's label (Store.State).
var raftStates = []string{"follower", "candidate", "leader", "shutdown"}
