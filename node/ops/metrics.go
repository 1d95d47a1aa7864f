package ops

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirlimit/weir/limit"
)

// checkMetrics are weir_checks_total, weir_check_seconds and
// weir_gateway_decisions_total.
type checkMetrics struct {
	checks      *prometheus.CounterVec
	latency     prometheus.Histogram
	gwDecisions *prometheus.CounterVec

	children sync.Map // rule id → *[nDecisions]prometheus.Counter of checks
}

func newCheckMetrics(reg *prometheus.Registry) *checkMetrics {
	m := &checkMetrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_checks_total", Help: "Checks by rule and decision (allowed, denied, error, voided: would have passed, but another rule of its group denied).",
		}, []string{"rule", "decision"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "weir_check_seconds", Help: "Time to answer a Check batch on the entry node.",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3},
		}),
		gwDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_gateway_decisions_total",
			Help: "Decisions gateways made without the owner and reported: reason local (lease or blocked-until cache), fail_open or fail_closed. Also counted in weir_checks_total.",
		}, []string{"rule", "decision", "reason"}),
	}
	reg.MustRegister(m.checks, m.latency, m.gwDecisions)
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
func (m *checkMetrics) checkCounters(rule string) *[nDecisions]prometheus.Counter {
	if c, ok := m.children.Load(rule); ok {
		return c.(*[nDecisions]prometheus.Counter)
	}
	var c [nDecisions]prometheus.Counter
	for d, name := range decisionNames {
		c[d] = m.checks.WithLabelValues(rule, name)
	}
	got, _ := m.children.LoadOrStore(rule, &c)
	return got.(*[nDecisions]prometheus.Counter)
}

// counts reads every rule's weir_checks_total, by decision.
func (m *checkMetrics) counts() map[string][nDecisions]float64 {
	out := map[string][nDecisions]float64{}
	m.children.Range(func(k, v any) bool {
		c := v.(*[nDecisions]prometheus.Counter)
		var got [nDecisions]float64
		for d := range nDecisions {
			var dm dto.Metric
			if c[d].Write(&dm) == nil {
				got[d] = dm.GetCounter().GetValue()
			}
		}
		out[k.(string)] = got
		return true
	})
	return out
}

// observeChecks counts a batch's decisions by rule (one counter update per
// run of items with the same rule and decision) and its latency.
func (m *checkMetrics) observeChecks(items []limit.Item, res []limit.Result, d time.Duration) {
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

// hotTop is how many keys per rule weir_hot_key_rate exposes.
const hotTop = 3

// hotCollector exposes each rule's hotTop hottest keys on this node as
// weir_hot_key_rate{rule, rank, key}: at most hotTop series per rule at any
// scrape (the keys change; the rank keeps the set bounded).
type hotCollector struct {
	o    *Ops
	desc *prometheus.Desc
}

func newHotCollector(o *Ops) *hotCollector {
	return &hotCollector{o: o, desc: prometheus.NewDesc("weir_hot_key_rate",
		"Estimated checks per second of a rule's hottest keys entering at this node (rank 1 is the hottest; redacted rules show a hash).",
		[]string{"rule", "rank", "key"}, nil)}
}

// Describe sends nothing: the collector is unchecked (its label values vary).
func (c *hotCollector) Describe(chan<- *prometheus.Desc) {}

func (c *hotCollector) Collect(ch chan<- prometheus.Metric) {
	rank, rule := 0, ""
	for _, k := range c.o.hotKeys("", hotTop, time.Unix(0, c.o.cfg.Now())) {
		if k.Rule != rule {
			rule, rank = k.Rule, 0
		}
		rank++
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, k.Rate, k.Rule, fmt.Sprint(rank), k.Key)
	}
}

// registerRaftMetrics exposes the Raft group's state as this node sees
// it, read at scrape time.
func registerRaftMetrics(reg *prometheus.Registry, s Store) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_raft_leader", Help: "1 when this node is the Raft leader."},
			func() float64 {
				if s.IsLeader() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_raft_last_index", Help: "Last index of this node's Raft log."},
			func() float64 { last, _ := s.Indexes(); return float64(last) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_raft_applied_index", Help: "Last Raft index applied to this node's rules (the rules version it serves)."},
			func() float64 { _, applied := s.Indexes(); return float64(applied) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_raft_last_contact_seconds", Help: "Seconds since this node last heard from the Raft leader (0 on the leader or before any contact)."},
			func() float64 {
				if t := s.LastContact(); !t.IsZero() && !s.IsLeader() {
					return time.Since(t).Seconds()
				}
				return 0
			}),
	)
	for _, st := range raftStates {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "weir_raft_state", Help: "1 for this node's current Raft state.", ConstLabels: prometheus.Labels{"state": st},
		}, func() float64 {
			if s.State() == st {
				return 1
			}
			return 0
		}))
	}
}

// raftStates are the values of weir_raft_state's label (Store.State).
var raftStates = []string{"follower", "candidate", "leader", "shutdown"}
