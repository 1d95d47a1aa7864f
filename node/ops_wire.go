package node

import (
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/node/events"
	"github.com/weirlimit/weir/node/opsapi"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// opsSource is the node as node/opsapi's Source.
type opsSource struct{ n *Node }

var _ opsapi.Source = opsSource{}

func (s opsSource) Self() string             { return s.n.cfg.ID }
func (s opsSource) Events() *events.Buffer   { return s.n.ops.events }
func (s opsSource) Rates() []opsapi.RuleRate { return s.n.opsRates() }
func (s opsSource) HotKeys(rule string, top int) []opsapi.HotKey {
	return s.n.hotKeys(rule, top, time.Unix(0, s.n.now()))
}

func (s opsSource) Gateways() []opsapi.Gateway {
	o := s.n.ops
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]opsapi.Gateway, 0, len(o.gateways))
	for _, g := range o.gateways {
		out = append(out, *g)
	}
	return opsapi.MergeGateways(out)
}

func (s opsSource) Peers() map[string]string {
	v := s.n.view.Load()
	out := map[string]string{}
	if v == nil {
		return out
	}
	for id, m := range v.members {
		if id != s.n.cfg.ID && m.HTTP != "" {
			out[id] = m.HTTP
		}
	}
	return out
}

func (s opsSource) Cluster() (opsapi.Cluster, opsapi.Rules) {
	n := s.n
	m := n.Members()
	leader, _ := n.store.Leader()
	last, applied := n.store.Indexes()
	c := opsapi.Cluster{
		Leader: leader, Term: n.store.Term(), AppliedIndex: applied, LastIndex: last, RaftState: n.store.State(),
		RingVersion: m.RingVersion, PartitionCount: m.PartitionCount, ReplicationFactor: m.ReplicationFactor,
		Members: make([]opsapi.Member, 0, len(m.Members)),
	}
	for _, mb := range m.Members {
		c.Members = append(c.Members, opsapi.Member{ID: mb.ID, State: mb.State, HTTPAddr: mb.HTTPAddr,
			PartitionsOwned: mb.PartitionsOwned, ReplicasHeld: mb.ReplicasHeld, RaftRole: mb.RaftRole})
	}
	set := n.store.Current()
	rs := opsapi.Rules{Rules: []opsapi.RuleInfo{}}
	if set == nil {
		return c, rs
	}
	rs.Version = set.Version
	for _, r := range set.Rules {
		r = rules.Normalize(r)
		rs.Rules = append(rs.Rules, opsapi.RuleInfo{ID: r.ID, Key: r.Key, Algorithm: r.Algorithm, Rate: r.Rate,
			Period: r.Period.String(), Burst: r.Burst, Shadow: r.Shadow})
	}
	slices.SortFunc(rs.Rules, func(a, b opsapi.RuleInfo) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	overridesByRule(rs.Rules, set.Overrides)
	if h := n.store.History(1); len(h) == 1 {
		e := h[0]
		ch := &opsapi.RuleChange{Version: e.Version, Author: e.Author, At: e.At.UTC(), Summary: e.Summary, Diff: []string{}}
		if hs := n.store.History(2); len(hs) == 2 {
			if prev, err := n.store.SetAt(hs[1].Version); err == nil {
				if cur, err := n.store.SetAt(e.Version); err == nil {
					ch.Diff = append(ch.Diff, rules.DiffSets(prev.Rules, cur.Rules)...)
				}
			}
		} else if cur, err := n.store.SetAt(e.Version); err == nil {
			ch.Diff = append(ch.Diff, rules.DiffSets(nil, cur.Rules)...)
		}
		rs.LastChange = ch
	}
	return c, rs
}

// Report applies a gateway's report: its decisions count in
// weir_checks_total (so a rule's rates include them) and, by reason, in
// weir_gateway_decisions_total; its events join this node's. Counts for
// rules this node does not know are dropped (the gateway's rules may be
// newer; the next report's are counted).
func (s opsSource) Report(rep opsapi.Report) error {
	n := s.n
	rv := n.rules()
	now := time.Unix(0, n.now()).UTC()
	var local, open, closed uint64
	for _, c := range rep.Counts {
		if rv.Rules[c.Rule] == nil {
			continue
		}
		cc := n.met.checkCounters(c.Rule)
		cc[decAllowed].Add(float64(c.LocalAllowed + c.FailOpen))
		cc[decDenied].Add(float64(c.LocalDenied + c.FailClosed))
		g := n.ops.gwDecisions
		g.WithLabelValues(c.Rule, "allowed", "local").Add(float64(c.LocalAllowed))
		g.WithLabelValues(c.Rule, "denied", "local").Add(float64(c.LocalDenied))
		g.WithLabelValues(c.Rule, "allowed", "fail_open").Add(float64(c.FailOpen))
		g.WithLabelValues(c.Rule, "denied", "fail_closed").Add(float64(c.FailClosed))
		local += c.LocalAllowed + c.LocalDenied
		open += c.FailOpen
		closed += c.FailClosed
	}
	for _, e := range rep.Events {
		cr := rv.Rules[e.Rule]
		if cr == nil {
			continue
		}
		at := e.Time
		if at.IsZero() {
			at = now
		}
		key := e.Key
		if cr.Rule.Events.Redact {
			key = events.Redact(key)
		}
		n.ops.events.Add(events.Event{Time: at.UTC(), Rule: e.Rule, RuleVersion: e.RuleVersion, Key: key,
			Decision: e.Decision, Remaining: e.Remaining, Node: n.cfg.ID, Gateway: rep.Gateway})
	}
	o := n.ops
	o.mu.Lock()
	defer o.mu.Unlock()
	g := o.gateways[rep.Gateway]
	if g == nil {
		if len(o.gateways) >= maxGateways {
			o.dropStalestGateway() // the intake admitted it (opsapi.Intake)
		}
		g = &opsapi.Gateway{ID: rep.Gateway, Nodes: []string{n.cfg.ID}}
		o.gateways[rep.Gateway] = g
	}
	g.LastReport = now
	g.Local += local
	g.FailOpen += open
	g.FailClosed += closed
	return nil
}

// maxGateways bounds the gateways one node tracks reports of.
const maxGateways = 10000

// newGatewayMetric is weir_gateway_decisions_total.
func newGatewayMetric(reg *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weir_gateway_decisions_total",
		Help: "Decisions gateways made without the owner and reported: reason local (lease or blocked-until cache), fail_open or fail_closed. Also counted in weir_checks_total.",
	}, []string{"rule", "decision", "reason"})
	reg.MustRegister(c)
	return c
}

// hotTop is how many keys per rule weir_hot_key_rate exposes.
const hotTop = 3

// hotCollector exposes each rule's hotTop hottest keys on this node as
// weir_hot_key_rate{rule, rank, key}: at most hotTop series per rule at any
// scrape (the keys change; the rank keeps the set bounded).
type hotCollector struct {
	n    *Node
	desc *prometheus.Desc
}

func newHotCollector(n *Node) *hotCollector {
	return &hotCollector{n: n, desc: prometheus.NewDesc("weir_hot_key_rate",
		"Estimated checks per second of a rule's hottest keys entering at this node (rank 1 is the hottest; redacted rules show a hash).",
		[]string{"rule", "rank", "key"}, nil)}
}

// Describe sends nothing: the collector is unchecked (its label values vary).
func (c *hotCollector) Describe(chan<- *prometheus.Desc) {}

func (c *hotCollector) Collect(ch chan<- prometheus.Metric) {
	rank, rule := 0, ""
	for _, k := range c.n.hotKeys("", hotTop, time.Unix(0, c.n.now())) {
		if k.Rule != rule {
			rule, rank = k.Rule, 0
		}
		rank++
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, k.Rate, k.Rule, fmt.Sprint(rank), k.Key)
	}
}

// initOps builds the operators' view and its edge (called by New, after
// the metrics and the store).
func (n *Node) initOps() {
	n.ops = newOpsState(time.Unix(0, n.now()))
	n.ops.gwDecisions = newGatewayMetric(n.cfg.Registry)
	n.cfg.Registry.MustRegister(newHotCollector(n))
	oc := opsapi.Config{Ctx: n.ctx, Logger: n.log.With("component", "ops"), PeerAuth: n.peerReads().Authorize}
	if n.tls != nil {
		oc.PeerTLS = n.tls.ClientConfig(tlsconf.RoleNode)
	}
	n.opsAPI = opsapi.New(oc, opsSource{n})
}

// peerReads is this node's credential on other members' parts of a
// cluster-wide read, and the check of theirs.
func (n *Node) peerReads() opsapi.PeerCredential {
	c := opsapi.PeerCredential{Self: n.cfg.ID, TLS: n.tls != nil, ReadToken: n.cfg.ReadToken, AdminToken: n.cfg.AdminToken}
	if n.auth != nil {
		c.Keys = n.auth
	}
	return c
}

// overridesByRule counts each rule's overrides into infos (both sorted by
// rule id, as the set keeps them) and lists the first few.
func overridesByRule(infos []opsapi.RuleInfo, ovs []rules.Override) {
	i := 0
	for _, o := range ovs {
		for i < len(infos) && infos[i].ID < o.Rule {
			i++
		}
		if i == len(infos) {
			return
		}
		if infos[i].ID != o.Rule {
			continue
		}
		infos[i].Overrides++
		if len(infos[i].OverrideSample) < opsapi.MaxOverrideSample {
			limit := "blocked"
			if !o.Block {
				limit = fmt.Sprintf("rate %d, burst %d", o.Rate, max(o.Burst, o.Rate))
			}
			infos[i].OverrideSample = append(infos[i].OverrideSample, opsapi.OverrideInfo{Key: o.Key, Limit: limit, ExpiresAt: o.ExpiresAt})
		}
	}
}
