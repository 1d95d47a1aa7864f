package sim

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
)

// The modelled timings (docs/design.md, "Simulator bounds"): what the
// simulator does not run, it stands in for with these.
const (
	detectMin, detectMax = 2100 * time.Millisecond, 3000 * time.Millisecond // memberlist: a silent member declared dead
	mergeMin, mergeMax   = 200 * time.Millisecond, 2000 * time.Millisecond  // a heal seen (a rejoin attempt every RejoinEvery)
	spreadMax            = 300 * time.Millisecond                           // a join, leave or restart gossiped
	electMin, electMax   = 150 * time.Millisecond, 1000 * time.Millisecond  // a Raft election
	electSlowMax         = 3000 * time.Millisecond                          // one election in ten takes 2-3 s
	netMin, netMax       = 200 * time.Microsecond, 2 * time.Millisecond     // one message's delay
	checkDeadline        = time.Second                                      // a check's deadline
	replInterval         = 5 * time.Millisecond                             // the replicator's flush
	handoffTick          = time.Second                                      // the hand-off's and the engine's tick
	leaveStep            = 100 * time.Millisecond
	leaveLimit           = 30 * time.Second
	pollEvery            = 5 * time.Millisecond // a wait for a pending partition re-reads the routes
)

// Options shape one run. Start from DefaultOptions.
type Options struct {
	Seed  uint64
	Nodes int
	// Duration is the simulated run: faults in its first 60%, then the
	// quiet part the after-quiescence invariants are judged on.
	Duration time.Duration
	// Faults is the schedule; nil draws it from the seed (Generate).
	Faults []Fault
	// Verbose keeps a readable trace.
	Verbose bool
	// Rate is checks per simulated second; HotKeys and ColdKeys the keys.
	Rate              float64
	HotKeys, ColdKeys int
	// Strict judges the known limits (docs/design.md, "Simulator
	// bounds") as violations: no grant for RPC-down faults or decisions
	// on no counters, decisions on released counters fed to the
	// reference, replicas whose view flapped compared.
	Strict bool
	// TwoRings adds the two-rings sequence to the aimed schedules (see
	// targeted): on in make sim's mix and searches (WEIR_SIM_TWO_RINGS=0
	// turns it off), off in DefaultOptions (docs/design.md, "Simulator
	// bounds").
	TwoRings bool
	// RecutJoin adds the recut-join sequence to the aimed schedules (see
	// targeted): a search's option (WEIR_SIM_RECUT_JOIN=1) for the
	// dropped-moved-mark switch, not the CI mix's (docs/benchmarks.md).
	RecutJoin bool
	// JoinLeave adds the join-leave sequence to the aimed schedules (see
	// targeted): a search's option (WEIR_SIM_JOIN_LEAVE=1) for the
	// two-pulls switch, not the CI mix's (docs/benchmarks.md).
	JoinLeave bool
	// RecutDelay adds the recut-delay sequence to the aimed schedules
	// (see targeted): a search's option (WEIR_SIM_RECUT_DELAY=1) for the
	// double-pull switch, not the CI mix's (docs/benchmarks.md).
	RecutDelay bool
	// RecutLoss adds the recut-loss sequence to the aimed schedules (see
	// targeted): a search's option (WEIR_SIM_RECUT_LOSS=1) for the
	// takeback-unreachable switch, on 11 or more nodes, not the CI mix's
	// (docs/design.md, "Simulator bounds").
	RecutLoss bool
	// FlapCut adds the flap-cut sequence to the aimed schedules (see
	// targeted): a search's option (WEIR_SIM_FLAP_CUT=1) for the
	// flap-leftovers switch, not the CI mix's.
	FlapCut bool
	// Ring is the ring's shape (shape.go); zero: production's default.
	Ring ring.Config
}

// DefaultOptions: 60 s, 60 checks/s over 4 hot and 100 cold keys.
func DefaultOptions(seed uint64, nodes int) Options {
	return Options{Seed: seed, Nodes: nodes, Duration: 60 * time.Second, Rate: 60, HotKeys: 4, ColdKeys: 100}
}

// The limits: hot keys burst 20 and 2/s, cold keys burst 3 and 1/20s.
var (
	hotLimit  = bucket.Limit{Algorithm: bucket.TokenBucket, Rate: 2, Period: time.Second, Burst: 20}
	coldLimit = bucket.Limit{Algorithm: bucket.TokenBucket, Rate: 1, Period: 20 * time.Second, Burst: 3}
)

// World is one simulated cluster run: hosts (a node id and its current
// incarnation's parts), the modelled network, gossip and Raft, the
// workload and the oracle, all on one goroutine.
type World struct {
	opt  Options
	loop *loop
	ctx  context.Context
	ring ring.Config

	rnd struct{ fault, net, work *rand.Rand }

	hosts map[string]*host
	order []string // every id ever, in creation order
	next  int      // the next id number for a join

	// Raft: the voters, the leader (""), whether an election is under way.
	voters   map[string]bool
	leader   string
	electing bool

	// The network: a host's group (partitions), message faults.
	group               map[string]int
	extraDelay          time.Duration
	lossPerMille, dupPM int

	groups  int           // partitions made so far (group ids)
	workEnd time.Duration // the workload stops here

	rpcAllowance bool
	deciding     bool // an engine.Check runs (its changes are decisions, not installs)

	keys   []keyInfo
	keyOf  map[uint64]int // counter id -> key
	oracle oracle
	err    error
}

type keyInfo struct {
	name string
	lim  bucket.Limit
	id   uint64
}

// host is one node id: its running incarnation's parts and what the
// models know of it.
type host struct {
	w     *World
	id    string
	inc   int // incarnation: restarts count up
	node  *Node
	up    bool // an incarnation runs (not killed, not left)
	left  bool
	boot  uint64
	skew  time.Duration
	tasks []*task

	pausedUntil time.Duration
	rpcDown     int             // RPC down while > 0 (gossip up)
	override    []string        // gossip-view fault: sees only these (nil: none)
	flapEnd     time.Duration   // when the last view fault ended
	syncing     bool            // a join's push/pull is under way
	viewFaulted bool            // its view had a fault (view, flap) in this incarnation
	deadSeenBy  map[string]bool // the hosts that saw this incarnation declared dead
	// restartUnseen: this incarnation restarted before every running
	// host had seen the last one declared dead (they resync nothing).
	restartUnseen bool
	// newcomer: a member that joined the running cluster (a join fault),
	// in its first incarnation: no one hears of it before its join's
	// push/pull (gossipPair).
	newcomer bool
	seen     map[string]clusterview.Member
	pend     map[string]bool
	quorum   clusterview.Quorum
	knows    bool // knows the Raft leader
	sampling bool
	regained bool
	flushing bool
	ticking  bool
	leave    *clusterview.Leave
	leaveAt  time.Duration

	adm []int64 // per key, what this incarnation admitted
	// ver counts each key's changes here; importVer is the change that
	// installed counters pulled or promoted (the oracle's kill grant).
	ver, importVer []int64
	ackedVer       map[string][]int64 // per sender, per key: the sender's ver its last state applied here carried
	fromInc        map[string]int     // per sender, the incarnation its last applied states came from
	acked          map[string][]int64 // per sender, per key: the sender's adm its last state applied here carried
	// copyAt and copyTokens: per key, when a hand-off reply last brought
	// this host a copy of it and the tokens that copy gives (copiesArrived).
	copyAt     map[uint64]time.Duration
	copyTokens map[uint64]int64
	// movedTo: per partition this incarnation owned by its ring, the
	// puller it handed the counters to anyway (a take-back later asks
	// it: unanswered).
	movedTo map[uint32]string
	// takingBack: the partitions of movedTo its tick took back (pending
	// from the puller: Partitions.tick), and the puller; backUnanswered:
	// those whose take-back the puller did not answer, and the puller
	// (InvTakeBackWaits).
	takingBack     map[uint32]string
	backUnanswered map[uint32]*host
	// handed: per partition, the keys whose counters a hand-off reply
	// that reached this incarnation carried away from their holder (its
	// exported ones, not its replica copies), each with its ver then:
	// until the pull installs them they are nowhere else (replyArrived).
	handed map[uint32]map[int]int64
}

func (h *host) paused() bool { return h.pausedUntil > h.w.loop.now }

// LeaderlessFor and TakeRegained: Raft as this host knows it.
func (h *host) LeaderlessFor() time.Duration { return h.quorum.LeaderlessFor() }
func (h *host) TakeRegained() bool {
	r := h.regained
	h.regained = false
	return r
}

func newWorld(opt Options) *World {
	w := &World{opt: opt, hosts: map[string]*host{}, voters: map[string]bool{}, group: map[string]int{}, keyOf: map[uint64]int{}}
	w.loop = newLoop(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), opt.Verbose)
	w.ctx = context.Background()
	w.ring = opt.ringConfig()
	w.rnd.fault = rand.New(rand.NewPCG(opt.Seed, 1))
	w.rnd.net = rand.New(rand.NewPCG(opt.Seed, 2))
	w.rnd.work = rand.New(rand.NewPCG(opt.Seed, 3))
	for i := range opt.HotKeys + opt.ColdKeys {
		k := keyInfo{name: fmt.Sprintf("hot%d", i), lim: hotLimit}
		if i >= opt.HotKeys {
			k = keyInfo{name: fmt.Sprintf("cold%d", i-opt.HotKeys), lim: coldLimit}
		}
		k.id = shard.CounterID("r", k.name)
		w.keyOf[k.id] = i
		w.keys = append(w.keys, k)
	}
	w.oracle.init(w)
	return w
}

func (w *World) between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

func (w *World) fail(err error) {
	if w.err == nil && err != nil {
		w.err = err
	}
}

func idx(id string) int64 {
	var n int64
	fmt.Sscanf(strings.TrimPrefix(id, "n"), "%d", &n)
	return n
}

// newHost adds id (not started).
func (w *World) newHost(id string) *host {
	h := &host{w: w, id: id}
	w.hosts[id] = h
	w.order = append(w.order, id)
	return h
}

// boot starts a new incarnation of h: new parts, a new Boot, no counters
// (kill -9 loses them: a restart keeps only the data dir, which holds
// none).
func (w *World) boot(h *host) {
	h.inc++
	h.up, h.left = true, false
	h.boot = w.rnd.net.Uint64()
	h.tasks = nil
	h.seen = map[string]clusterview.Member{}
	h.pend = map[string]bool{}
	h.quorum = clusterview.Quorum{}
	h.knows, h.sampling, h.regained, h.flushing, h.ticking, h.syncing = false, false, false, false, false, false
	h.leave = nil
	h.override, h.viewFaulted = nil, false // a new process's gossip view is its own: a view fault ends with the incarnation
	h.restartUnseen = false
	h.newcomer = h.inc == 1 && w.loop.now > 0
	if h.inc > 1 {
		for _, o := range w.hosts {
			if o != h && o.up && !h.deadSeenBy[o.id] {
				h.restartUnseen = true
			}
		}
	}
	h.deadSeenBy = map[string]bool{}
	w.oracle.deathRace(h)
	if h.restartUnseen && !w.opt.Strict {
		// Known limit (docs/design.md): restarted before it was declared
		// dead, it settles what it owned from the base owners' copies,
		// which may be copies kept past their placement: up to a burst
		// for each key it had decided.
		for k, n := range h.adm {
			if n > 0 {
				w.oracle.allow[k] += float64(w.keys[k].lim.Capacity())
				w.oracle.knownRestarts++
			}
		}
	}
	h.adm = make([]int64, len(w.keys))
	h.ver, h.importVer = make([]int64, len(w.keys)), make([]int64, len(w.keys))
	h.acked, h.ackedVer, h.fromInc = map[string][]int64{}, map[string][]int64{}, map[string]int{}
	h.copyAt, h.copyTokens = map[uint64]time.Duration{}, map[uint64]int64{}
	h.movedTo = map[uint32]string{}
	h.takingBack, h.backUnanswered = map[uint32]string{}, map[uint32]*host{}
	h.handed = map[uint32]map[int]int64{}
	hs := hostSched{Sim: w.loop.clock, h: h}
	n, err := build(h.id, env{
		sched:  hs,
		ring:   w.ring,
		shards: 2,
		tick:   replInterval,
		peers:  worldPeers{h},
		send:   worldSend{h},
		leader: h,
		now:    hs.Now,
		onChange: func(states []replication.State) {
			for _, st := range states {
				if k, ok := w.keyOf[st.ID]; ok {
					h.ver[k]++
					if !w.deciding && !st.Fresh() {
						h.importVer[k] = h.ver[k] // installed: pulled or promoted counters
						w.oracle.installed(h, k, st.Partition)
					}
				}
			}
			w.scheduleFlush(h)
		},
		logger: w.logger(h),
		rings:  memoRing,
	})
	if err != nil {
		w.fail(err)
		return
	}
	h.node = n
	n.joining = true // it joins (--join): no ring before it has company
	for _, o := range w.hosts {
		delete(o.acked, h.id) // acknowledgements of the last incarnation's admissions
		delete(o.ackedVer, h.id)
	}
	w.voters[h.id] = true
	w.loop.rec('B', idx(h.id), int64(h.inc), 0, func() string { return fmt.Sprintf("boot %s #%d", h.id, h.inc) })
	// It knows itself at once.
	w.report(h, h.id, w.member(h))
	w.startTicks(h)
	w.sample(h)
}

func (w *World) member(h *host) clusterview.Member {
	m := clusterview.Member{ID: h.id, State: clusterview.Alive, GRPC: h.id, Gossip: h.id, Boot: h.boot}
	if h.node != nil && h.node.leaving {
		m.Leaving = true
	}
	return m
}

// stop ends h's incarnation: its parts close, its coroutines get
// errKilled at every wait until they end.
func (w *World) stop(h *host) {
	if !h.up {
		return
	}
	h.up = false
	h.node.stop()
	for _, t := range h.tasks {
		for range 1000 {
			if t.done || !t.waiting || t.wake == nil {
				break
			}
			t.wake(nil, errKilled)
		}
	}
	h.tasks = nil
}

// ---- gossip ----

// reachable: gossip between a and b gets through (both run, neither is
// paused, same side of every partition).
func (w *World) reachable(a, b *host) bool {
	return a.up && b.up && !a.paused() && !b.paused() && w.group[a.id] == w.group[b.id]
}

// want is what gossip should tell x of y now: a live member, or gone
// (with Dead or Left).
func (w *World) want(x, y *host) (clusterview.Member, bool) {
	if x == y {
		return w.member(y), true
	}
	if y.left {
		return clusterview.Member{ID: y.id, State: clusterview.Left, GRPC: y.id, Gossip: y.id, Boot: y.boot}, false
	}
	see := w.reachable(x, y)
	if x.override != nil {
		see = y.up && slices.Contains(x.override, y.id)
	}
	if !see {
		return clusterview.Member{ID: y.id, State: clusterview.Dead, GRPC: y.id, Gossip: y.id, Boot: y.boot}, false
	}
	return w.member(y), true
}

// gossip schedules, for every running host and every other, the update
// of its view that the truth now calls for, after the modelled delay.
func (w *World) gossip() {
	for _, xid := range w.order {
		x := w.hosts[xid]
		if !x.up {
			continue
		}
		for _, yid := range w.order {
			w.gossipPair(x, w.hosts[yid])
		}
	}
}

// unheard: a new member still joining, which no one has heard of before
// its join's push/pull.
func (h *host) unheard() bool { return h.newcomer && h.node.joining }

func (w *World) gossipPair(x, y *host) {
	if x.node.joining {
		w.joinSync(x)
		return
	}
	if x == y || x.pend[y.id] {
		return
	}
	if y.up && y.unheard() {
		// Nobody hears of a new member before its join's push/pull
		// (memberlist's Join): that exchange gives it the member list,
		// and only then does its contact gossip it on (joinSync).
		// Before, a joiner that left again at once could be in every
		// other ring while it had none of its own, so its leave waited
		// for nothing (sim/testdata/fixed-join-leave-cold.txt).
		return
	}
	m, live := w.want(x, y)
	have, had := x.seen[y.id]
	if live == had && (!live || have == m) {
		return
	}
	if !live && !had {
		return
	}
	var d time.Duration
	switch {
	case x.override != nil:
		d = 0 // a fault of this host's own view: at once
	case live && x.flapEnd > 0 && w.loop.now-x.flapEnd < time.Second:
		d = w.between(w.rnd.net, 0, 50*time.Millisecond) // the view comes back
	case !live && m.State == clusterview.Left:
		d = w.between(w.rnd.net, 0, spreadMax)
	case !live:
		d = w.between(w.rnd.net, detectMin, detectMax)
	case had && have.Boot == m.Boot && have.Leaving == m.Leaving:
		d = 0
	case !had && x.everSaw(y):
		d = w.between(w.rnd.net, mergeMin, mergeMax)
	default:
		d = w.between(w.rnd.net, 0, spreadMax)
	}
	x.pend[y.id] = true
	inc := x.inc
	var apply func()
	apply = func() {
		if x.inc != inc || !x.up {
			return
		}
		if x.paused() {
			w.loop.after(x.pausedUntil-w.loop.now, apply) // a paused process hears nothing
			return
		}
		x.pend[y.id] = false
		m, live := w.want(x, y)
		have, had := x.seen[y.id]
		if live != had || (live && have != m) {
			if !live {
				m2 := m
				if had {
					m2.Boot = have.Boot
				}
				m = m2
			}
			w.report(x, y.id, m)
			w.refresh(x)
		}
		w.gossipPair(x, y)
	}
	w.loop.after(d, apply)
}

// joinSync is a join's push/pull with a member it reaches: the joiner
// learns every member that member knows at once, so its first ring is
// complete (as memberlist's Join does). Retried every second while it
// reaches nobody.
func (w *World) joinSync(x *host) {
	if x.syncing {
		return
	}
	x.syncing = true
	inc := x.inc
	w.loop.after(w.between(w.rnd.net, 0, spreadMax), func() {
		if x.inc != inc || !x.up {
			return
		}
		x.syncing = false
		var got []*host
		for _, id := range w.order {
			y := w.hosts[id]
			// A new member still joining is known to no one before its
			// own push/pull (gossipPair), so this one does not learn it.
			if _, live := w.want(x, y); live && y != x && !y.unheard() {
				got = append(got, y)
			}
		}
		if len(got) == 0 {
			w.loop.after(time.Second, func() {
				if x.inc == inc {
					w.joinSync(x)
				}
			})
			return
		}
		for _, y := range got {
			m, _ := w.want(x, y)
			w.report(x, y.id, m)
		}
		// The push/pull is both ways: the member it joined through
		// learns of it at once too.
		contact := got[w.rnd.net.IntN(len(got))]
		if m, live := w.want(contact, x); live && !contact.node.joining {
			w.report(contact, x.id, m)
			w.refresh(contact)
		}
		w.refresh(x)
		for _, id := range w.order {
			w.gossipPair(x, w.hosts[id])
		}
		if x.newcomer {
			// The others hear of it from here on, as gossip spreads it.
			for _, id := range w.order {
				if o := w.hosts[id]; o != x && o.up {
					w.gossipPair(o, x)
				}
			}
		}
	})
}

// everSaw: x's book saw y before (a heal or restart, not a first join).
func (h *host) everSaw(y *host) bool { return h.node != nil && h.node.book.IsDeparted(y.id) }

// report tells x's book what membership says of member id.
func (w *World) report(x *host, id string, m clusterview.Member) {
	if m.State == clusterview.Alive {
		x.seen[id] = m
	} else {
		if y := w.hosts[id]; y != nil && m.State == clusterview.Dead && y.deadSeenBy != nil {
			y.deadSeenBy[x.id] = true
		}
		delete(x.seen, id)
		// A take-back from id may settle from copies now (Partitions'
		// Unreached with the holder departed), even if gossip has id
		// back by the time its ask fails (InvTakeBackWaits).
		maps.DeleteFunc(x.takingBack, func(_ uint32, peer string) bool { return peer == id })
		maps.DeleteFunc(x.backUnanswered, func(_ uint32, b *host) bool { return b.id == id })
	}
	x.node.book.Report(m, w.loop.clock.Now())
	if x.node.joining && len(x.seen) > 1 {
		x.node.joining = false // the join succeeded
	}
	st := int64(0)
	if m.State != clusterview.Alive {
		st = 1
	}
	w.loop.rec('G', idx(x.id), idx(id), st, func() string {
		return fmt.Sprintf("%s sees %s %s leaving=%t", x.id, id, m.State, m.Leaving)
	})
}

// refresh steps x's ring-view policy (as node/membership's refreshView).
func (w *World) refresh(x *host) {
	if !x.up {
		return
	}
	before := x.node.view.Load()
	if err := x.node.Refresh(w.ctx); err != nil {
		w.fail(fmt.Errorf("refresh %s: %w", x.id, err))
		return
	}
	if v := x.node.view.Load(); v != before && v != nil && (before == nil || v.ring != before.ring) {
		w.loop.rec('R', idx(x.id), int64(len(v.ring.Members())), int64(len(v.ring.OwnedBy(x.id))), func() string {
			return fmt.Sprintf("%s ring %v owns %d", x.id, v.ring.Members(), len(v.ring.OwnedBy(x.id)))
		})
	}
}

// ---- Raft ----

// component lists the running hosts h's Raft traffic reaches (its side).
func (w *World) component(h *host) []string {
	var out []string
	for _, id := range w.order {
		o := w.hosts[id]
		if o.up && !o.paused() && w.group[o.id] == w.group[h.id] && !h.paused() && h.up {
			out = append(out, id)
		}
	}
	return out
}

func (w *World) majority(side []string) bool {
	n := 0
	for _, id := range side {
		if w.voters[id] {
			n++
		}
	}
	return 2*n > len(w.voters)
}

// raft updates the leader after a change of the network or the members:
// a leader stays while its side is a majority of the voters; else one is
// elected after a delay, the least id of a majority side (a fixed rule).
func (w *World) raft() {
	if w.leader != "" {
		l := w.hosts[w.leader]
		if !l.up || l.paused() || !w.majority(w.component(l)) {
			w.leader = ""
			w.loop.rec('L', 0, 0, 0, func() string { return "leader lost" })
		}
	}
	if w.leader == "" && !w.electing {
		w.electing = true
		d := w.between(w.rnd.net, electMin, electMax)
		if w.rnd.net.IntN(10) == 0 {
			d = w.between(w.rnd.net, 2*time.Second, electSlowMax)
		}
		w.loop.after(d, func() {
			w.electing = false
			for _, id := range w.order {
				h := w.hosts[id]
				if h.up && !h.paused() && w.majority(w.component(h)) {
					w.leader = id
					w.loop.rec('L', idx(id), 1, 0, func() string { return "leader " + id })
					break
				}
			}
			w.knowLeaders()
			if w.leader == "" {
				w.raft()
			}
		})
	}
	w.knowLeaders()
}

func (w *World) knowLeaders() {
	for _, id := range w.order {
		h := w.hosts[id]
		if !h.up {
			continue
		}
		knows := w.leader != "" && slices.Contains(w.component(w.hosts[w.leader]), id)
		if knows != h.knows {
			h.knows = knows
			w.sample(h)
		}
	}
}

// sample runs h's quorum watch, one sample every QuorumSample while it
// knows no leader (idle otherwise: a known leader changes nothing).
func (w *World) sample(h *host) {
	if h.sampling || !h.up {
		return
	}
	h.sampling = true
	inc := h.inc
	var tick func()
	tick = func() {
		if h.inc != inc || !h.up {
			return
		}
		if h.paused() {
			w.loop.after(h.pausedUntil-w.loop.now, tick)
			return
		}
		probe, regained := h.quorum.Tick(h.knows)
		if probe {
			answers := false
			for id := range h.node.book.Live() {
				if o := w.hosts[id]; o != h && w.rpcUp(h, o) {
					answers = true
					break
				}
			}
			regained = h.quorum.Answered(answers) || regained
		}
		if regained {
			h.regained = true
			w.loop.rec('Q', idx(h.id), 0, 0, func() string { return h.id + " quorum regained" })
			w.refresh(h)
		}
		if h.knows {
			h.sampling = false
			return
		}
		w.loop.after(clusterview.QuorumSample, tick)
	}
	w.loop.after(clusterview.QuorumSample, tick)
}

// ---- the nodes' own clocks: ticks and flushes ----

func (w *World) startTicks(h *host) {
	inc := h.inc
	var tick func()
	tick = func() {
		if h.inc != inc || !h.up {
			return
		}
		if !h.paused() {
			w.oracle.takeBackWaits(h)
			var marks []uint32 // moved to a puller while this node's ring owns them
			for _, p := range slices.Sorted(maps.Keys(h.movedTo)) {
				if st, _ := h.node.handoff.Routes().State(p); st == replication.PartMoved {
					marks = append(marks, p)
				}
			}
			if err := h.node.handoff.Tick(w.ctx); err != nil {
				w.fail(fmt.Errorf("tick %s: %w", h.id, err))
			}
			for _, p := range marks {
				if st, peer := h.node.handoff.Routes().State(p); st == replication.PartPending && peer == h.movedTo[p] {
					h.takingBack[p] = peer
				}
			}
			if err := h.node.engine.Tick(); err != nil {
				w.fail(fmt.Errorf("sweep %s: %w", h.id, err))
			}
		}
		w.loop.after(handoffTick, tick)
	}
	w.loop.after(w.between(w.rnd.net, 0, handoffTick), tick)
}

// scheduleFlush flushes h's replicator a replication interval after its
// engine changed counters (idle replicators are not woken).
func (w *World) scheduleFlush(h *host) {
	if h.flushing {
		return
	}
	h.flushing = true
	inc := h.inc
	w.loop.after(replInterval, func() {
		if h.inc != inc || !h.up {
			return
		}
		h.flushing = false
		if h.paused() {
			w.scheduleFlush(h)
			return
		}
		if err := h.node.repl.Flush(w.ctx); err != nil {
			w.fail(fmt.Errorf("flush %s: %w", h.id, err))
		}
		if h.node.repl.Stats().Pending > 0 {
			h.flushing = true
			w.loop.after(100*time.Millisecond, func() {
				if h.inc == inc && h.up {
					h.flushing = false
					w.scheduleFlush(h)
				}
			})
		}
	})
}

// ---- the network ----

func (w *World) rpcUp(a, b *host) bool {
	return a.up && b.up && w.group[a.id] == w.group[b.id] && a.rpcDown == 0 && b.rpcDown == 0
}

// send carries one message from a to b: lost when the link is down or a
// loss fault drops it, else delivered after a delay (to b's incarnation
// of now; a paused b takes it when it resumes). dup may deliver it twice.
func (w *World) send(a, b *host, dup bool, deliver func()) {
	if !w.rpcUp(a, b) {
		return
	}
	if w.lossPerMille > 0 && w.rnd.net.IntN(1000) < w.lossPerMille {
		w.loop.rec('X', idx(a.id), idx(b.id), 0, nil)
		return
	}
	inc := b.inc
	var arrive func()
	arrive = func() {
		if b.inc != inc || !b.up {
			return
		}
		if b.paused() {
			w.loop.after(b.pausedUntil-w.loop.now, arrive)
			return
		}
		deliver()
	}
	d := w.between(w.rnd.net, netMin, netMax) + w.extraDelay
	w.loop.after(d, arrive)
	if dup && w.dupPM > 0 && w.rnd.net.IntN(1000) < w.dupPM {
		// Delivered again right after the first (a retransmission): a
		// duplicate applied after a newer send would leave a stale copy,
		// the exception replication's doc names.
		w.loop.after(d, arrive)
	}
}

// worldSend is a host's replication transport: a message to the
// replica, applied there, acknowledged back.
type worldSend struct{ h *host }

func (t worldSend) Replicate(ctx context.Context, to, from string, states []replication.State) error {
	w, a := t.h.w, t.h
	b := w.hosts[to]
	if b == nil {
		return fmt.Errorf("%w: no node %s", ErrSim, to)
	}
	// What these states carry of this incarnation's admissions.
	stamps, vers := make([]int64, len(states)), make([]int64, len(states))
	for i, st := range states {
		if k, ok := w.keyOf[st.ID]; ok {
			stamps[i], vers[i] = a.adm[k], a.ver[k]
		}
	}
	sent := slices.Clone(states)
	for i := range sent {
		sent[i].Log = slices.Clone(sent[i].Log)
	}
	ainc := a.inc
	_, err := w.loop.await(ctx, func(answer func(any, error)) {
		w.send(a, b, true, func() {
			err := b.node.replicas.Apply(from, sent)
			w.loop.rec('P', idx(a.id), idx(b.id), int64(len(sent)), func() string {
				var ks []string
				for _, st := range sent {
					ks = append(ks, fmt.Sprintf("%s(p%d)", w.keyName(st.ID), st.Partition))
				}
				return fmt.Sprintf("%s replicates to %s: %v err %v", a.id, b.id, ks, err)
			})
			if err == nil && a.inc == ainc {
				b.fromInc[from] = ainc
				acks, avers := b.acked[from], b.ackedVer[from]
				if acks == nil {
					acks, avers = make([]int64, len(w.keys)), make([]int64, len(w.keys))
					b.acked[from], b.ackedVer[from] = acks, avers
				}
				for i, st := range sent {
					if k, ok := w.keyOf[st.ID]; ok {
						acks[k], avers[k] = stamps[i], vers[i]
					}
				}
			}
			w.send(b, a, false, func() { answer(nil, err) })
		})
	})
	return err
}

// worldPeers is a host's hand-off client: an ask to the holder, served
// there once the partitions are not pending, the reply back.
type worldPeers struct{ h *host }

func (p worldPeers) Handoff(ctx context.Context, addr string, req replication.HandoffRequest) (replication.HandoffReply, error) {
	w, a := p.h.w, p.h
	b := w.hosts[addr]
	if b == nil {
		return replication.HandoffReply{}, fmt.Errorf("%w: no node %s", ErrSim, addr)
	}
	dl, _ := ctx.Deadline()
	var pulls []uint32 // the asked partitions that are not take-backs
	for _, p := range req.Parts {
		if a.movedTo[p] != b.id {
			pulls = append(pulls, p)
		}
	}
	v, err := w.loop.await(ctx, func(answer func(any, error)) {
		w.send(a, b, false, func() {
			var serve func()
			waited := false
			serve = func() {
				if !b.up || w.loop.clock.Now().After(dl) {
					if waited && b.up && !w.opt.Strict {
						w.oracle.waitedOut(a, b, req.Parts)
					}
					return // the asker gave up: nothing is handed over
				}
				if b.node.handoff.Waits(req) {
					waited = true
					w.loop.after(pollEvery, serve)
					return
				}
				sctx, cancel := w.loop.clock.WithTimeout(w.ctx, dl.Sub(w.loop.clock.Now()))
				reply, err := b.node.handoff.Serve(sctx, req)
				cancel()
				if v := b.node.view.Load(); v != nil {
					for _, p := range reply.Held {
						// Handed to a on a's ring while b's own still has b
						// the owner: b will take it back (Partitions.tick).
						if v.ring.PartitionOwner(p) == b.id {
							b.movedTo[p] = a.id
						} else {
							delete(b.movedTo, p)
						}
					}
				}
				w.loop.rec('H', idx(b.id), idx(a.id), int64(len(reply.Held)), func() string {
					return fmt.Sprintf("%s serves %s parts %v: held %v moved %d err %v", b.id, a.id, req.Parts, reply.Held, len(reply.Moved), err)
				})
				delivered := false
				passed := w.oracle.passed(b, req.Parts, reply)
				w.send(b, a, false, func() {
					delivered = true
					w.oracle.replyArrived(a, passed)
					answer(reply, err)
				})
				if !delivered && (len(reply.Held) > 0 || waited) {
					// Checked when the asker's deadline passes: a reply
					// that never arrived took the holder's counters along;
					// one served after a wait for the holder's own pull
					// timed out all the same.
					w.loop.after(dl.Sub(w.loop.clock.Now()), func() {
						if delivered {
							return
						}
						if waited && !w.opt.Strict {
							w.oracle.waitedOut(a, b, req.Parts)
						}
						if len(reply.Held) > 0 {
							w.oracle.lostHandoff(b, reply.Held, reply.States)
						}
					})
				}
			}
			serve()
		})
	})
	if err != nil {
		if a.up && !w.opt.Strict {
			w.oracle.unanswered(a, pulls)
		}
		for _, p := range req.Parts {
			// Read now, not when the ask was sent: the take-back's pull
			// asks b within a's Tick, before startTicks records it.
			if a.up && a.takingBack[p] == b.id && !a.node.book.IsDeparted(b.id) {
				a.backUnanswered[p] = b
			}
		}
		return replication.HandoffReply{}, err
	}
	reply := v.(replication.HandoffReply)
	for _, p := range req.Parts {
		delete(a.movedTo, p) // answered: a holds it again, or learns where it is
		delete(a.takingBack, p)
	}
	for _, p := range reply.Held {
		delete(a.backUnanswered, p) // a holder's counters after all (InvTakeBackWaits)
	}
	if !w.opt.Strict {
		w.oracle.copiesArrived(a, reply.Copies)
	}
	return reply, nil
}

// ---- checks ----

// check is one check in flight.
type check struct {
	key      int
	entry    *host
	entryInc int
	at       time.Duration
	deadline time.Duration
	answered bool
	quiet    bool // entered in the quiet window
}

func (w *World) workload() {
	var next func()
	next = func() {
		if w.loop.now >= w.workEnd {
			return
		}
		r := w.rnd.work
		k := r.IntN(w.opt.ColdKeys)
		if w.opt.HotKeys > 0 && r.IntN(10) < 7 {
			k = r.IntN(w.opt.HotKeys)
		} else {
			k += w.opt.HotKeys
		}
		start := r.IntN(len(w.order))
		for i := range w.order {
			h := w.hosts[w.order[(start+i)%len(w.order)]]
			if h.up {
				c := &check{key: k, entry: h, entryInc: h.inc, at: w.loop.now, deadline: w.loop.now + checkDeadline, quiet: w.oracle.inQuiet(w.loop.now)}
				w.oracle.entered(c)
				w.checkAt(h, c, replication.Via{}, 0)
				break
			}
		}
		gap := time.Duration(r.ExpFloat64() / w.opt.Rate * float64(time.Second))
		w.loop.after(max(gap, time.Microsecond), next)
	}
	w.loop.after(0, next)
}

// checkAt routes c at h, as node.check does: decide, wait for the pull,
// forward (a message), or answer unavailable.
func (w *World) checkAt(h *host, c *check, via replication.Via, hops int) {
	if w.loop.now > c.deadline || !h.up {
		return
	}
	if h.paused() {
		w.loop.after(h.pausedUntil-w.loop.now, func() { w.checkAt(h, c, via, hops) })
		return
	}
	v := h.node.view.Load()
	if v == nil {
		w.answer(h, c, false, "no ring")
		return
	}
	rt := replication.Router{Self: h.id, Leaving: h.node.leaving, Table: h.node.handoff.Routes(), View: v}
	p := v.ring.Partition(w.keys[c.key].name)
	to := rt.Route(p, via)
	if to.Do == replication.Wait {
		if h.node.handoff.Routes().Ready(p) != nil {
			w.loop.after(pollEvery, func() { w.checkAt(h, c, via, hops) })
			return
		}
		to.Do = replication.Decide
	}
	if to.Do == replication.Decide {
		ok, movedTo := h.node.handoff.Pin(p)
		if ok {
			st, _ := h.node.handoff.Routes().State(p)
			k := w.keys[c.key]
			out := make([]shard.Result, 1)
			var pre stateWords
			if !w.oracle.inQuiet(w.loop.now) {
				pre = w.oracle.counter(h, c.key, p)
			}
			w.deciding = true
			err := h.node.engine.Check(w.ctx, []shard.Item{{ID: k.id, Partition: p, Limit: k.lim, Cost: 1}}, out)
			w.deciding = false
			h.node.handoff.Unpin(p)
			if err != nil {
				w.fail(fmt.Errorf("decide at %s: %w", h.id, err))
				return
			}
			w.oracle.decided(h, c, p, st, out[0].Allowed, out[0].Remaining, hops, pre)
			w.answer(h, c, true, "")
			return
		}
		to = rt.Reroute(p, movedTo, via)
	}
	switch to.Do {
	case replication.Forward:
		b := w.hosts[to.To]
		if b == nil {
			w.answer(h, c, false, "no node "+to.To)
			return
		}
		fwd := replication.Via{Forwarded: true}
		if via.Forwarded {
			fwd.Hops = via.Hops + 1
		}
		w.send(h, b, false, func() { w.checkAt(b, c, fwd, hops+1) })
	case replication.Unavailable:
		w.answer(h, c, false, to.Why)
	default:
		w.fail(fmt.Errorf("%w: router said %s", ErrSim, to.Do))
	}
}

// answer sends c's answer from h back to its entry node.
func (w *World) answer(h *host, c *check, ok bool, why string) {
	if h == c.entry {
		w.oracle.answered(c, ok)
		return
	}
	w.send(h, c.entry, false, func() {
		if c.entry.inc == c.entryInc {
			w.oracle.answered(c, ok)
		}
	})
}

// ---- leave ----

// startLeave leaves h gracefully (node.Leave): marked leaving, out of
// every ring; the new owners pull; then it leaves gossip and Raft.
func (w *World) startLeave(h *host) {
	if !h.up || h.node.leaving {
		return
	}
	var owned []uint32
	if v := h.node.view.Load(); v != nil && len(v.members) > 1 {
		owned = v.ring.OwnedBy(h.id)
	}
	w.oracle.spreadRace(h)
	h.node.leaving = true
	w.report(h, h.id, w.member(h))
	w.refresh(h)
	w.loop.rec('V', idx(h.id), int64(len(owned)), 0, func() string { return fmt.Sprintf("leave %s (owned %d)", h.id, len(owned)) })
	h.leave = clusterview.NewLeave(owned, w.loop.clock.Now)
	h.leaveAt = w.loop.now
	w.gossip()
	inc := h.inc
	var step func()
	step = func() {
		if h.inc != inc || !h.up {
			return
		}
		out, left := h.leave.Step(worldLeave{leaveWatch{h.node}, h})
		if out == clusterview.StillLeaving && w.loop.now-h.leaveAt < leaveLimit {
			w.loop.after(leaveStep, step)
			return
		}
		w.loop.rec('W', idx(h.id), int64(out), int64(left), func() string { return fmt.Sprintf("left %s: %s, %d not handed off", h.id, out, left) })
		if !w.opt.Strict {
			w.oracle.lastHolder(h)
			w.oracle.leavingCopies(h)
		}
		w.stop(h)
		h.left = true
		delete(w.voters, h.id)
		w.gossip()
		w.raft()
	}
	w.loop.after(leaveStep, step)
}

// worldLeave is leaveWatch with peers that answer as the world's links do.
type worldLeave struct {
	leaveWatch
	h *host
}

func (l worldLeave) PeersAnswer() bool {
	for id := range l.h.node.book.Live() {
		if o := l.h.w.hosts[id]; o != nil && o != l.h && l.h.w.rpcUp(l.h, o) {
			return true
		}
	}
	return false
}

// ---- the run's end ----

// quiescent: every running host's view is the truth, every ring the
// same, and every host knows the Raft leader.
func (w *World) quiescent() bool {
	var first []string
	for _, id := range w.order {
		h := w.hosts[id]
		if !h.up {
			continue
		}
		if !h.knows || anyTrue(h.pend) || h.leave != nil || h.node.handoff.Routes().Pending() > 0 {
			return false // a leave or a pull still under way is a fault still under way
		}
		for _, yid := range w.order {
			m, live := w.want(h, w.hosts[yid])
			have, had := h.seen[yid]
			if live != had || (live && have != m) {
				return false
			}
		}
		v := h.node.view.Load()
		if v == nil {
			return false
		}
		if first == nil {
			first = v.ring.Members()
		} else if !slices.Equal(first, v.ring.Members()) {
			return false
		}
	}
	return first != nil
}

func anyTrue(m map[string]bool) bool {
	for _, v := range m {
		if v {
			return true
		}
	}
	return false
}

// logger is h's hand-off log in a verbose run: its lines join the
// readable trace (a run that keeps none formats no log).
func (w *World) logger(h *host) *slog.Logger {
	if !w.loop.verbose {
		return nil
	}
	return slog.New(traceHandler{w: w, id: h.id})
}

type traceHandler struct {
	w     *World
	id    string
	attrs []slog.Attr
}

func (t traceHandler) Enabled(context.Context, slog.Level) bool { return true }
func (t traceHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s log: %s", t.id, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	t.w.loop.readable = append(t.w.loop.readable, fmt.Sprintf("%9s %s", t.w.loop.now, b.String()))
	return nil
}
func (t traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	t.attrs = append(slices.Clone(t.attrs), as...)
	return t
}
func (t traceHandler) WithGroup(string) slog.Handler { return t }
