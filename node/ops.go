package node

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/events"
	"github.com/weirlimit/weir/node/hotkeys"
	"github.com/weirlimit/weir/node/opsapi"
	"github.com/weirlimit/weir/node/router"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// The operators' view of the decisions this node answers as the entry
// node (where a check came in, as weir_checks_total counts them): sampled
// limit events, hot keys per rule and per-rule rates. Nothing here is on
// the decision's critical path beyond observe, which allocates only for a
// sampled event or a sketch's new key.

const (
	// hotEvery: on average one item in hotEvery feeds the hot-key
	// sketches (with weight hotEvery), at random gaps.
	hotEvery = 32
	// hotSlots is the keys one rule's sketch holds.
	hotSlots = 64
	// hotWindow is how long a sketch counts before it becomes the
	// previous window (rates are over the previous and current windows).
	hotWindow = 30 * time.Second
	// rateStep and ratePoints: per-rule rates are kept for
	// rateStep*ratePoints (5 minutes).
	rateStep   = 2 * time.Second
	ratePoints = 150
	// gatewayTTL: a gateway that has not reported for this long (it
	// reports every few seconds, even with nothing to count) is forgotten.
	gatewayTTL = 10 * time.Minute
	// eventCapacity is the events a node keeps.
	eventCapacity = 4096
	// firstDenialEvery: the first denial of each rule in each such
	// interval is an event whatever the rule's sample rate.
	firstDenialEvery = time.Second
)

// opsState is the node's operator view. mu guards the sketches, rates and
// gateway reports; the events buffer has its own lock.
type opsState struct {
	events *events.Buffer
	firsts *events.Firsts // the first denial per rule per firstDenialEvery

	mu        sync.Mutex
	hot       map[string]*hotPair // by rule
	hotSince  time.Time           // start of the current sketch window
	hotPrevD  time.Duration       // length of the previous window
	rates     map[string][]opsapi.RatePoint
	lastCount map[string][nDecisions]float64 // cumulative counts at the last step
	gateways  map[string]*opsapi.Gateway

	gwDecisions *prometheus.CounterVec // weir_gateway_decisions_total
}

type hotPair struct{ cur, prev *hotkeys.Sketch }

func newOpsState(now time.Time) *opsState {
	return &opsState{
		events:    events.New(eventCapacity),
		firsts:    events.NewFirsts(firstDenialEvery),
		hot:       map[string]*hotPair{},
		hotSince:  now,
		rates:     map[string][]opsapi.RatePoint{},
		lastCount: map[string][nDecisions]float64{},
		gateways:  map[string]*opsapi.Gateway{},
	}
}

// observe samples a decided batch: events for denials (the first of each
// rule in each firstDenialEvery, the others at the rule's events.sample)
// and for every item the owner could not decide (the
// caller's fail mode applies), and one item in hotEvery into the rule's
// hot-key sketch.
func (n *Node) observe(items []limit.Item, res []limit.Result) {
	o := n.ops
	cnt := uint64(len(items))
	// Random gaps averaging hotEvery items (not a fixed stride, which
	// aliases with periodic traffic): one random draw per sampled item.
	if first := rand.Uint64N(hotEvery); first < cnt {
		o.mu.Lock()
		for i := first; i < cnt; i += 1 + rand.Uint64N(2*hotEvery-1) {
			if res[i].Code == limit.CodeNone && !items[i].Refund {
				o.hotAdd(items[i].Rule, items[i].Key)
			}
		}
		o.mu.Unlock()
	}
	var rv *router.RuleView
	for i := range res {
		r := &res[i]
		var dec string
		switch {
		case r.Code == limit.CodeUnavailable:
			dec = events.Error
		case r.Code == limit.CodeNone && !r.Allowed && !r.Voided && !items[i].Refund:
			dec = events.Denied
		default:
			continue
		}
		if rv == nil {
			rv = n.rules()
		}
		cr := rv.Rules[items[i].Rule]
		if cr == nil {
			continue
		}
		if dec == events.Denied && !o.firsts.First(cr.Rule.ID, n.now()) && !events.Sampled(cr.Rule.Events.SampleRate(), rand.Uint64()) {
			continue
		}
		n.addEvent(cr.Rule, items[i].Key, dec, r.Remaining, r.RuleVersion, "")
	}
}

// addEvent records one event; a rule with events.redact gets the key's hash.
func (n *Node) addEvent(r rules.Rule, key, dec string, remaining int64, version uint64, gateway string) {
	if r.Events.Redact {
		key = events.Redact(key)
	}
	if version == 0 {
		version = n.rules().Version
	}
	n.ops.events.Add(events.Event{
		Time: time.Unix(0, n.now()).UTC(), Rule: r.ID, RuleVersion: version, Key: key,
		Decision: dec, Remaining: remaining, Node: n.cfg.ID, Gateway: gateway,
	})
}

// hotAdd counts one sampled item (mu held).
func (o *opsState) hotAdd(rule, key string) {
	p := o.hot[rule]
	if p == nil {
		p = &hotPair{cur: hotkeys.New(hotSlots), prev: hotkeys.New(hotSlots)}
		o.hot[rule] = p
	}
	p.cur.Add(key, hotEvery)
}

// opsLoop steps the per-rule rates every rateStep and rotates the hot-key
// windows, until the node closes.
func (n *Node) opsLoop() {
	t := time.NewTicker(rateStep)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-t.C:
			n.opsStep(now)
		}
	}
}

// opsStep records the decisions per second since the last step, per rule,
// from weir_checks_total, and rotates hot-key windows.
func (n *Node) opsStep(now time.Time) {
	counts := map[string][nDecisions]float64{}
	n.met.checkChildren.Range(func(k, v any) bool {
		c := v.(*[nDecisions]prometheus.Counter)
		var got [nDecisions]float64
		for d := range nDecisions {
			var m dto.Metric
			if c[d].Write(&m) == nil {
				got[d] = m.GetCounter().GetValue()
			}
		}
		counts[k.(string)] = got
		return true
	})
	live := n.rules().Rules
	o := n.ops
	o.mu.Lock()
	defer o.mu.Unlock()
	t := now.Truncate(rateStep).Unix()
	secs := rateStep.Seconds()
	for rule, c := range counts {
		if _, ok := live[rule]; !ok {
			delete(o.rates, rule)
			delete(o.lastCount, rule)
			continue
		}
		last := o.lastCount[rule] // zero at first: counters start at zero with the node
		o.lastCount[rule] = c
		pts := append(o.rates[rule], opsapi.RatePoint{T: t,
			Allowed: (c[decAllowed] - last[decAllowed]) / secs,
			Denied:  (c[decDenied] - last[decDenied]) / secs,
			Error:   (c[decError] - last[decError]) / secs})
		if len(pts) > ratePoints {
			pts = slices.Delete(pts, 0, len(pts)-ratePoints)
		}
		o.rates[rule] = pts
	}
	o.firsts.Forget(func(rule string) bool { _, ok := live[rule]; return ok })
	for rule := range o.hot {
		if _, ok := live[rule]; !ok {
			delete(o.hot, rule)
		}
	}
	for id, g := range o.gateways {
		if now.Sub(g.LastReport) > gatewayTTL {
			delete(o.gateways, id)
		}
	}
	if d := now.Sub(o.hotSince); d >= hotWindow {
		for _, p := range o.hot {
			p.prev, p.cur = p.cur, p.prev
			p.cur.Reset()
		}
		o.hotSince, o.hotPrevD = now, d
	}
}

// hotKeys answers up to top hottest keys per rule (rule "" for all), by
// estimated rate over the previous and current sketch windows.
func (n *Node) hotKeys(rule string, top int, now time.Time) []opsapi.HotKey {
	o := n.ops
	rv := n.rules()
	o.mu.Lock()
	defer o.mu.Unlock()
	span := (o.hotPrevD + now.Sub(o.hotSince)).Seconds()
	if span <= 0 {
		span = 1
	}
	var out []opsapi.HotKey
	for id, p := range o.hot {
		if rule != "" && id != rule {
			continue
		}
		redact := false
		if cr := rv.Rules[id]; cr != nil {
			redact = cr.Rule.Events.Redact
		}
		sum := map[string][2]uint64{}
		for _, s := range []*hotkeys.Sketch{p.prev, p.cur} {
			for _, e := range s.Top(-1) {
				v := sum[e.Key]
				sum[e.Key] = [2]uint64{v[0] + e.Count, v[1] + e.Err}
			}
		}
		var keys []opsapi.HotKey
		for k, v := range sum {
			if redact {
				k = events.Redact(k)
			}
			keys = append(keys, opsapi.HotKey{Rule: id, Key: k, Rate: float64(v[0]) / span, ErrRate: float64(v[1]) / span})
		}
		sortHot(keys)
		if top > 0 && len(keys) > top {
			keys = keys[:top]
		}
		out = append(out, keys...)
	}
	slices.SortStableFunc(out, func(a, b opsapi.HotKey) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}

func sortHot(keys []opsapi.HotKey) {
	slices.SortFunc(keys, func(a, b opsapi.HotKey) int {
		switch {
		case a.Rate > b.Rate:
			return -1
		case a.Rate < b.Rate:
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
}

// opsRates copies the per-rule rate series, by rule.
func (n *Node) opsRates() []opsapi.RuleRate {
	o := n.ops
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]opsapi.RuleRate, 0, len(o.rates))
	for rule, pts := range o.rates {
		out = append(out, opsapi.RuleRate{Rule: rule, Points: slices.Clone(pts)})
	}
	slices.SortFunc(out, func(a, b opsapi.RuleRate) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}
