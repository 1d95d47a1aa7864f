package ops

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/internal/sched"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/api"
	"github.com/weirlimit/weir/node/events"
	"github.com/weirlimit/weir/node/hotkeys"
	"github.com/weirlimit/weir/node/opsapi"
	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
)

const (
	// hotEvery: on average one item in hotEvery feeds the hot-key
	// sketches (with weight hotEvery), at random gaps.
	hotEvery = 32
	// hotSlots is the keys one rule's sketch holds.
	hotSlots = 64
	// hotWindow is how long a sketch counts before it becomes the
	// previous window (rates are over the previous and current windows).
	hotWindow = 30 * time.Second
	// RateStep and ratePoints: per-rule rates are kept for
	// RateStep*ratePoints (5 minutes).
	RateStep   = 2 * time.Second
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

// RuleView is the rules the node serves now.
type RuleView interface {
	// Rule is the live rule id, or false.
	Rule(id string) (rules.Rule, bool)
	// Version is the version of the live rules.
	Version() uint64
}

// Store is the replicated rule store (the Raft group) as the dashboard
// and the Raft metrics read it; *rulesraft.Store is one.
type Store interface {
	Leader() (id, addr string)
	IsLeader() bool
	Term() uint64
	State() string
	Indexes() (last, applied uint64)
	LastContact() time.Time
	Current() *rules.Set
	History(limit int) []rulesraft.HistoryEntry
	SetAt(v uint64) (*rules.Set, error)
}

// Members is the membership as this node sees it.
type Members interface {
	// Members is the cluster: members, ring shape (the Raft fields of
	// the dashboard come from Store).
	Members() api.Members
	// Peers maps the other live members' ids to their HTTP addresses.
	Peers() map[string]string
}

// Permits counts the concurrency permits held on this node's counters,
// by rule; *shard.Engine is one.
type Permits interface {
	PermitsHeld(ctx context.Context) (map[string]int64, error)
}

// Config is what Ops needs besides its parts.
type Config struct {
	ID       string       // this node's id
	Now      func() int64 // the node's clock, unix ns
	Registry *prometheus.Registry
	Logger   *slog.Logger
	// PeerTLS, when set, is the TLS client configuration of reading other
	// members' parts; PeerAuth adds this node's credential to such a read
	// (opsapi.Config).
	PeerTLS  *tls.Config
	PeerAuth func(*http.Request)
}

// Ops is the node's operator view and its edge. mu guards the sketches,
// rates and gateway reports; the events buffer has its own lock.
type Ops struct {
	cfg     Config
	rules   RuleView
	store   Store
	members Members
	permits Permits
	met     *checkMetrics
	api     *opsapi.Server

	events *events.Buffer
	firsts *events.Firsts // the first denial per rule per firstDenialEvery

	mu        sync.Mutex
	hot       map[string]*hotPair // by rule
	hotSince  time.Time           // start of the current sketch window
	hotPrevD  time.Duration       // length of the previous window
	rates     map[string][]opsapi.RatePoint
	lastCount map[string][nDecisions]float64 // cumulative counts at the last step
	gateways  map[string]*opsapi.Gateway
}

type hotPair struct{ cur, prev *hotkeys.Sketch }

// New builds the operator view, registers its metrics on cfg.Registry
// and builds its edge; ctx is the node's lifetime (it ends the events
// followers).
func New(ctx context.Context, cfg Config, rv RuleView, store Store, members Members, permits Permits) *Ops {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	o := newOps(cfg, rv)
	o.store, o.members, o.permits = store, members, permits
	o.met = newCheckMetrics(cfg.Registry)
	cfg.Registry.MustRegister(newHotCollector(o))
	registerRaftMetrics(cfg.Registry, store)
	o.api = opsapi.New(opsapi.Config{Ctx: ctx, Logger: cfg.Logger, PeerAuth: cfg.PeerAuth, PeerTLS: cfg.PeerTLS}, source{o})
	return o
}

// newOps is the state alone (no metrics, no edge).
func newOps(cfg Config, rv RuleView) *Ops {
	return &Ops{
		cfg:       cfg,
		rules:     rv,
		events:    events.New(eventCapacity),
		firsts:    events.NewFirsts(firstDenialEvery),
		hot:       map[string]*hotPair{},
		hotSince:  time.Unix(0, cfg.Now()),
		rates:     map[string][]opsapi.RatePoint{},
		lastCount: map[string][nDecisions]float64{},
		gateways:  map[string]*opsapi.Gateway{},
	}
}

// Register adds the operators' HTTP routes to mux.
func (o *Ops) Register(mux *http.ServeMux) { o.api.Register(mux) }

// RegisterGRPC adds the Ops service to g.
func (o *Ops) RegisterGRPC(g *grpc.Server) { o.api.RegisterGRPC(g) }

// Close waits for the edge's goroutines (the node's context must be done).
func (o *Ops) Close() { o.api.Close() }

// Observe counts a decided batch in weir_checks_total and its latency d,
// and samples it: events for denials (the first of each rule in each
// firstDenialEvery, the others at the rule's events.sample) and for every
// item the owner could not decide (the caller's fail mode applies), and
// one item in hotEvery into the rule's hot-key sketch.
func (o *Ops) Observe(items []limit.Item, res []limit.Result, d time.Duration) {
	o.met.observeChecks(items, res, d)
	o.sample(items, res)
}

// KeyCapped counts an item a shard refused at its rule's key cap
// (weir_shard_key_cap_hits_total).
func (o *Ops) KeyCapped(rule string) { o.met.keyCapHits.WithLabelValues(rule).Inc() }

func (o *Ops) sample(items []limit.Item, res []limit.Result) {
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
		rule, ok := o.rules.Rule(items[i].Rule)
		if !ok {
			continue
		}
		if dec == events.Denied && !o.firsts.First(rule.ID, o.cfg.Now()) && !events.Sampled(rule.Events.SampleRate(), rand.Uint64()) {
			continue
		}
		ver := r.RuleVersion
		if ver == 0 {
			ver = o.rules.Version()
		}
		o.addEvent(events.Event{Time: time.Unix(0, o.cfg.Now()), RuleVersion: ver,
			Key: items[i].Key, Decision: dec, Remaining: r.Remaining}, rule)
	}
}

// addEvent records one event of rule r at this node (a rule with
// events.redact gets the key's hash).
func (o *Ops) addEvent(e events.Event, r rules.Rule) {
	if r.Events.Redact {
		e.Key = events.Redact(e.Key)
	}
	e.Time, e.Rule, e.Node, e.Seq = e.Time.UTC(), r.ID, o.cfg.ID, 0
	o.events.Add(e)
}

// hotAdd counts one sampled item (mu held).
func (o *Ops) hotAdd(rule, key string) {
	p := o.hot[rule]
	if p == nil {
		p = &hotPair{cur: hotkeys.New(hotSlots), prev: hotkeys.New(hotSlots)}
		o.hot[rule] = p
	}
	p.cur.Add(key, hotEvery)
}

// Run steps the per-rule rates every RateStep and rotates the hot-key
// windows, until ctx ends.
func (o *Ops) Run(ctx context.Context) {
	t := sched.Real{}.NewTicker(RateStep) // aligned with the other 1 s loops
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C():
			o.step(now)
		}
	}
}

// step records the decisions per second since the last step, per rule,
// from weir_checks_total, and rotates hot-key windows.
func (o *Ops) step(now time.Time) {
	counts := o.met.counts()
	o.mu.Lock()
	defer o.mu.Unlock()
	t := now.Truncate(RateStep).Unix()
	secs := RateStep.Seconds()
	live := func(rule string) bool { _, ok := o.rules.Rule(rule); return ok }
	for rule, c := range counts {
		if !live(rule) {
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
	o.firsts.Forget(live)
	for rule := range o.hot {
		if !live(rule) {
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
func (o *Ops) hotKeys(rule string, top int, now time.Time) []opsapi.HotKey {
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
		r, _ := o.rules.Rule(id)
		sum := map[string][2]uint64{}
		for _, s := range []*hotkeys.Sketch{p.prev, p.cur} {
			for _, e := range s.Top(-1) {
				v := sum[e.Key]
				sum[e.Key] = [2]uint64{v[0] + e.Count, v[1] + e.Err}
			}
		}
		var keys []opsapi.HotKey
		for k, v := range sum {
			if r.Events.Redact {
				k = events.Redact(k)
			}
			keys = append(keys, opsapi.HotKey{Rule: id, Key: k, Rate: float64(v[0]) / span, ErrRate: float64(v[1]) / span})
		}
		keys = opsapi.MergeHotKeys(keys, top)
		out = append(out, keys...)
	}
	slices.SortStableFunc(out, func(a, b opsapi.HotKey) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}

// ratesCopy copies the per-rule rate series, by rule.
func (o *Ops) ratesCopy() []opsapi.RuleRate {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]opsapi.RuleRate, 0, len(o.rates))
	for rule, pts := range o.rates {
		out = append(out, opsapi.RuleRate{Rule: rule, Points: slices.Clone(pts)})
	}
	slices.SortFunc(out, func(a, b opsapi.RuleRate) int { return strings.Compare(a.Rule, b.Rule) })
	return out
}
