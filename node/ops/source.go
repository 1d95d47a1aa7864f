package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weirlimit/weir/node/events"
	"github.com/weirlimit/weir/node/opsapi"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// source is Ops as node/opsapi's Source.
type source struct{ o *Ops }

var _ opsapi.Source = source{}

func (s source) Self() string             { return s.o.cfg.ID }
func (s source) Events() *events.Buffer   { return s.o.events }
func (s source) Rates() []opsapi.RuleRate { return s.o.ratesCopy() }
func (s source) Peers() map[string]string { return s.o.members.Peers() }
func (s source) HotKeys(rule string, top int) []opsapi.HotKey {
	return s.o.hotKeys(rule, top, time.Unix(0, s.o.cfg.Now()))
}

func (s source) Gateways() []opsapi.Gateway {
	o := s.o
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]opsapi.Gateway, 0, len(o.gateways))
	for _, g := range o.gateways {
		out = append(out, *g)
	}
	return opsapi.MergeGateways(out)
}

// Permits counts the permits held on this node's counters, by rule (the
// owner holds a key's permits: the cluster's sum counts each once).
func (s source) Permits(ctx context.Context) ([]opsapi.RulePermits, error) {
	held, err := s.o.permits.PermitsHeld(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]opsapi.RulePermits, 0, len(held))
	for rule, n := range held {
		out = append(out, opsapi.RulePermits{Rule: rule, InUse: n})
	}
	return opsapi.MergePermits(out), nil
}

func (s source) Cluster() (opsapi.Cluster, opsapi.Rules) {
	st := s.o.store
	m := s.o.members.Members()
	leader, _ := st.Leader()
	last, applied := st.Indexes()
	c := opsapi.Cluster{
		Leader: leader, Term: st.Term(), AppliedIndex: applied, LastIndex: last, RaftState: st.State(),
		RingVersion: m.RingVersion, PartitionCount: m.PartitionCount, ReplicationFactor: m.ReplicationFactor,
		Members: make([]opsapi.Member, 0, len(m.Members)),
	}
	for _, mb := range m.Members {
		c.Members = append(c.Members, opsapi.Member{ID: mb.ID, State: mb.State, HTTPAddr: mb.HTTPAddr,
			PartitionsOwned: mb.PartitionsOwned, ReplicasHeld: mb.ReplicasHeld, RaftRole: mb.RaftRole})
	}
	return c, s.rules()
}

// rules is the rule set as the dashboard lists it, with its last change.
func (s source) rules() opsapi.Rules {
	st := s.o.store
	set := st.Current()
	rs := opsapi.Rules{Rules: []opsapi.RuleInfo{}}
	if set == nil {
		return rs
	}
	rs.Version = set.Version
	for _, r := range set.Rules {
		r = rules.Normalize(r)
		rs.Rules = append(rs.Rules, opsapi.RuleInfo{ID: r.ID, Key: r.Key, Algorithm: r.Algorithm, Rate: r.Rate,
			Period: r.Period.String(), Burst: r.Burst, Shadow: r.Shadow, Concurrency: r.Concurrency})
	}
	slices.SortFunc(rs.Rules, func(a, b opsapi.RuleInfo) int { return strings.Compare(a.ID, b.ID) })
	overridesByRule(rs.Rules, set.Overrides)
	if h := st.History(1); len(h) == 1 {
		e := h[0]
		ch := &opsapi.RuleChange{Version: e.Version, Author: e.Author, At: e.At.UTC(), Summary: e.Summary, Diff: []string{}}
		if hs := st.History(2); len(hs) == 2 {
			if prev, err := st.SetAt(hs[1].Version); err == nil {
				if cur, err := st.SetAt(e.Version); err == nil {
					ch.Diff = append(ch.Diff, rules.DiffSets(prev.Rules, cur.Rules)...)
				}
			}
		} else if cur, err := st.SetAt(e.Version); err == nil {
			ch.Diff = append(ch.Diff, rules.DiffSets(nil, cur.Rules)...)
		}
		rs.LastChange = ch
	}
	return rs
}

// Report applies a gateway's report: its decisions count in
// weir_checks_total (so a rule's rates include them) and, by reason, in
// weir_gateway_decisions_total; its events join this node's. Counts for
// rules this node does not know are dropped (the gateway's rules may be
// newer; the next report's are counted).
func (s source) Report(rep opsapi.Report) error {
	o := s.o
	now := time.Unix(0, o.cfg.Now()).UTC()
	var local, open, closed uint64
	for _, c := range rep.Counts {
		if _, ok := o.rules.Rule(c.Rule); !ok {
			continue
		}
		cc := o.met.checkCounters(c.Rule)
		cc[decAllowed].Add(float64(c.LocalAllowed + c.FailOpen))
		cc[decDenied].Add(float64(c.LocalDenied + c.FailClosed))
		g := o.met.gwDecisions
		g.WithLabelValues(c.Rule, "allowed", "local").Add(float64(c.LocalAllowed))
		g.WithLabelValues(c.Rule, "denied", "local").Add(float64(c.LocalDenied))
		g.WithLabelValues(c.Rule, "allowed", "fail_open").Add(float64(c.FailOpen))
		g.WithLabelValues(c.Rule, "denied", "fail_closed").Add(float64(c.FailClosed))
		local += c.LocalAllowed + c.LocalDenied
		open += c.FailOpen
		closed += c.FailClosed
	}
	for _, e := range rep.Events {
		r, ok := o.rules.Rule(e.Rule)
		if !ok {
			continue
		}
		if e.Time.IsZero() {
			e.Time = now
		}
		e.Gateway = rep.Gateway
		o.addEvent(e, r)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	g := o.gateways[rep.Gateway]
	if g == nil {
		if len(o.gateways) >= maxGateways {
			o.dropStalestGateway() // the intake admitted it (opsapi.Intake)
		}
		g = &opsapi.Gateway{ID: rep.Gateway, Nodes: []string{o.cfg.ID}}
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

// dropStalestGateway forgets the gateway that reported least recently
// (mu held). opsapi.Intake decides which gateways may report; this
// table, holding what they reported for the dashboard, follows it: a
// gateway the intake admitted is never refused here.
func (o *Ops) dropStalestGateway() {
	var stalest string
	var at time.Time
	for id, g := range o.gateways {
		if stalest == "" || g.LastReport.Before(at) {
			stalest, at = id, g.LastReport
		}
	}
	delete(o.gateways, stalest)
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
