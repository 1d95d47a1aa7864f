package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirlimit/weir/internal/bug"
	"github.com/weirlimit/weir/internal/sched"
)

// Counters is what the hand-off needs of the shard engine: the live
// counters of whole partitions.
type Counters interface {
	Export(ctx context.Context, parts []uint32) ([]State, error)
	Import(ctx context.Context, states []State) error
	Drop(ctx context.Context, parts []uint32) error
}

// Peers asks another node (by its gRPC address) for partitions' counters:
// the client side of Handoff.Serve.
type Peers interface {
	Handoff(ctx context.Context, addr string, req HandoffRequest) (HandoffReply, error)
}

// Resyncer queues a full copy of a few partitions' counters for their
// replicas (the Replicator's Resync).
type Resyncer interface {
	Resync(ctx context.Context, export func(context.Context) ([]State, error)) (int, error)
}

var _ Resyncer = (*Replicator)(nil)

// HandoffRequest asks for the counters of Parts on behalf of To, which owns
// them now.
type HandoffRequest struct {
	To    string
	Parts []uint32
}

// HandoffReply answers a HandoffRequest: the counters of the partitions
// handed over (Held, States), where the ones handed on earlier went
// (Moved), and the replica copies of every asked partition (Copies), for
// when no live node holds one.
type HandoffReply struct {
	Held   []uint32
	Moved  []Moved
	States []State
	Copies []State
}

// ErrBadRequest is returned by Serve for a request that names no puller,
// names this node, or names a partition out of range. Nothing changes.
var ErrBadRequest = errors.New("bad hand-off request")

// ErrClosed is returned once the Handoff's Run has returned (an Inline
// one's Close was called).
var ErrClosed = errors.New("replication closed")

// HandoffConfig tunes a Handoff.
type HandoffConfig struct {
	Self       string
	Partitions int
	// Grace is how long a released partition waits for its new owner to
	// pull it, and how long a replica copy no longer placed here is kept
	// for a new owner to pull.
	Grace time.Duration
	// Settle is how long a partition may stay moved to another node while
	// this node's ring says this node owns it; then it is pulled back.
	// Rings disagree for about a gossip round while a change spreads, so
	// this is a few of those.
	Settle time.Duration
	// AskTimeout bounds one ask of one peer; MaxAsks the nodes asked for
	// one partition. An unreachable node is not declared dead before about
	// 2 s with the default gossip timing; a holder still pulling answers
	// once its pull arrived.
	AskTimeout time.Duration
	MaxAsks    int
	// InstallTimeout bounds installing pulled counters in the engine.
	InstallTimeout time.Duration
	// TickEvery is how often time is stepped (released partitions and
	// replica copies let go).
	TickEvery time.Duration
	// ResyncRetry is the wait before retrying a resync the replication
	// queue had no room for (about the replication interval).
	ResyncRetry time.Duration
	// Now is the clock in unix ns; nil is Sched's.
	Now func() int64
	// Sched starts the pulls and resyncs and runs the ticker and the
	// asks' deadlines; nil is production (sched.Real).
	Sched sched.Sched
	// Inline makes a hand-off with no Run and no ticker: ChangeRing,
	// Serve and Tick step the machine on the caller's goroutine, one
	// event at a time, and run its effects there; the pulls and resyncs
	// they start go through Sched (a schedtest.Sim queues them for its
	// driver). Serve still waits for a partition the hand-off is itself
	// pulling: such a driver runs the pull first. Close ends it. A
	// simulation steps it this way.
	Inline bool
	Logger *slog.Logger
}

// DefaultHandoffConfig returns the defaults for node self with n partitions.
func DefaultHandoffConfig(self string, n int) HandoffConfig {
	return HandoffConfig{
		Self:           self,
		Partitions:     n,
		Grace:          30 * time.Second,
		Settle:         3 * time.Second,
		AskTimeout:     3 * time.Second,
		MaxAsks:        8,
		InstallTimeout: 5 * time.Second,
		TickEvery:      time.Second,
		ResyncRetry:    5 * time.Millisecond,
	}
}

// HandoffStats counts what the hand-off moved.
type HandoffStats struct {
	HandedOff uint64 // partitions handed to a puller
	Promoted  uint64 // replica copies promoted to counters
	Resynced  uint64 // counter states sent in full to a new replica
	// Unreached counts partitions a take-back found its holder not
	// answering for (left moved, asked for again after Settle).
	Unreached uint64
}

// Handoff runs the partition state machine (Partitions) of one node and
// the hand-off protocol around it. One goroutine, Run, owns the machine:
// ring changes, arrivals, asks and hand-backs reach it as events on one
// channel, and it publishes an immutable Routes snapshot after each, which
// the check path reads without locks. Run starts the pulls and resyncs the
// machine asks for as work of their own (HandoffConfig.Sched) and joins
// them before it returns. An Inline hand-off has no Run: its callers'
// events are applied on their goroutines, one at a time, by the same
// code (apply).
//
// Checks that decide a partition locally hold it with Pin (a read lock of
// the partition's fence) from routing until their decision is made; a
// hand-off marks the partition moved (published), then takes the fence's
// write lock once, so every check that saw the partition here is decided
// before its counters are exported, and every later one sees it moved.
type Handoff struct {
	cfg      HandoffConfig
	counters Counters
	peers    Peers
	replicas *Store
	resync   Resyncer

	m       *Partitions // owned by Run
	reqs    chan request
	routes  atomic.Pointer[Routes]
	fence   []fence
	stopped chan struct{}
	running atomic.Bool

	// An Inline hand-off's: mu is held while an event is applied (the
	// machine's owner in place of Run), life is the context of the work
	// the effects start, ended by Close.
	mu   sync.Mutex
	life context.Context
	end  context.CancelFunc

	// The pulls' asks in flight: asks.on[p] is the member whose answer
	// the pull of p waits for (and has not got p's counters from a holder
	// yet); asks.changed is closed on each change (see waitsFor).
	asks struct {
		sync.Mutex
		on      map[uint32]string
		changed chan struct{}
	}

	handedOff, promoted, resynced, unreached atomic.Uint64

	// passedOn[p]: this process has handed p's counters to a puller
	// (Serve), so a mark naming this node may be its own (see fetch).
	passedOn []atomic.Bool
}

// fence is one partition's pin lock, padded to a cache line of its own so
// checks pinning neighbouring partitions on different cores do not share
// one.
type fence struct {
	sync.RWMutex
	_ [64 - 24]byte
}

type request struct {
	ev   Event
	done chan Reply
}

// Routes is one published state of every partition, immutable. Changed is
// closed when a newer Routes is published. It is held in chunks of
// routeChunkLen partitions that a newer Routes shares while none of
// theirs changed (copy on write), so publishing after an event costs the
// chunks it touched, not every partition (2039 by default).
type Routes struct {
	chunks  []*routeChunk
	live    map[string]string
	pending int
	changed chan struct{}
}

// routeChunkLen partitions make a chunk of Routes.
const routeChunkLen = 64

// routeChunk is the state of routeChunkLen partitions (fewer in the last).
type routeChunk struct {
	state [routeChunkLen]PartState
	peer  [routeChunkLen]string
	owner [routeChunkLen]string
	ready [routeChunkLen]chan struct{} // non-nil while pending; closed on leaving pending
	// pending is how many of its partitions are.
	pending int
}

func (r *Routes) at(p uint32) (*routeChunk, uint32) {
	return r.chunks[p/routeChunkLen], p % routeChunkLen
}

// State returns p's state and peer (pending: the previous holder or "";
// moved: the puller).
func (r *Routes) State(p uint32) (PartState, string) {
	c, i := r.at(p)
	return c.state[i], c.peer[i]
}

// ownedReady: self owns p by the last ring and holds it ready.
func (r *Routes) ownedReady(p uint32, self string) bool {
	c, i := r.at(p)
	return c.owner[i] == self && c.state[i] == PartReady
}

// owner is p's owner by the last ring.
func (r *Routes) owner(p uint32) string { c, i := r.at(p); return c.owner[i] }

// Ready is closed once p is no longer pending (nil when it is not).
func (r *Routes) Ready(p uint32) <-chan struct{} {
	c, i := r.at(p)
	return c.ready[i]
}

// Pending is how many partitions wait for their counters.
func (r *Routes) Pending() int { return r.pending }

// Changed is closed when a newer Routes is published.
func (r *Routes) Changed() <-chan struct{} { return r.changed }

// NewHandoff returns the hand-off of one node. replicas holds the replica
// copies this node received; resync may be nil (no resyncs).
func NewHandoff(cfg HandoffConfig, counters Counters, peers Peers, replicas *Store, resync Resyncer) (*Handoff, error) {
	switch {
	case cfg.Self == "" || cfg.Partitions <= 0:
		return nil, fmt.Errorf("%w: hand-off needs Self and Partitions > 0", ErrInvalidConfig)
	case cfg.Grace <= 0 || cfg.Settle <= 0 || cfg.AskTimeout <= 0 || cfg.InstallTimeout <= 0 || cfg.TickEvery <= 0 || cfg.ResyncRetry <= 0 || cfg.MaxAsks < 1:
		return nil, fmt.Errorf("%w: hand-off timeouts must be > 0 and MaxAsks >= 1", ErrInvalidConfig)
	case counters == nil || peers == nil || replicas == nil:
		return nil, ErrNilDependency
	}
	cfg.Sched = sched.Or(cfg.Sched)
	if cfg.Now == nil {
		clock := cfg.Sched
		cfg.Now = func() int64 { return clock.Now().UnixNano() }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handoff{
		cfg: cfg, counters: counters, peers: peers, replicas: replicas, resync: resync,
		m:       NewPartitions(cfg.Self, cfg.Partitions, int64(cfg.Grace), int64(cfg.Settle)),
		reqs:    make(chan request),
		fence:   make([]fence, cfg.Partitions),
		stopped: make(chan struct{}),

		passedOn: make([]atomic.Bool, cfg.Partitions),
	}
	if cfg.Inline {
		h.life, h.end = context.WithCancel(context.Background())
	}
	h.asks.on, h.asks.changed = map[uint32]string{}, make(chan struct{})
	h.routes.Store(h.snapshot(nil, nil))
	return h, nil
}

// Routes returns the current snapshot.
func (h *Handoff) Routes() *Routes { return h.routes.Load() }

// Stats returns what was moved so far.
func (h *Handoff) Stats() HandoffStats {
	return HandoffStats{HandedOff: h.handedOff.Load(), Promoted: h.promoted.Load(), Resynced: h.resynced.Load(), Unreached: h.unreached.Load()}
}

// Pin holds p against a hand-off while a check decides it here. It fails,
// naming where p went ("" when unknown), when p was handed off since the
// check routed it. Every successful Pin needs one Unpin. A check that pins
// several partitions pins them in ascending order (a hand-off waiting for
// one partition's pins blocks new pins of it, so two checks pinning in
// opposite orders could each wait for the other).
func (h *Handoff) Pin(p uint32) (ok bool, movedTo string) {
	h.fence[p].RLock()
	if st, peer := h.routes.Load().State(p); st == PartMoved {
		h.fence[p].RUnlock()
		return false, peer
	}
	return true, ""
}

// Unpin releases a Pin.
func (h *Handoff) Unpin(p uint32) { h.fence[p].RUnlock() }

// Run owns the machine until ctx ends, then waits for the pulls and
// resyncs it started. It must be called once, and not on an Inline
// hand-off (ErrRunning).
func (h *Handoff) Run(ctx context.Context) error {
	if h.cfg.Inline {
		return fmt.Errorf("%w: an Inline hand-off is stepped by its callers, not Run", ErrRunning)
	}
	if !h.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	var wg sync.WaitGroup
	defer func() {
		close(h.stopped)
		wg.Wait()
	}()
	goFunc := func(f func()) {
		wg.Add(1)
		h.cfg.Sched.Go(func() {
			defer wg.Done()
			f()
		})
	}
	t := h.cfg.Sched.NewTicker(h.cfg.TickEvery)
	defer t.Stop()
	for {
		var r request
		select {
		case <-ctx.Done():
			return nil
		case r = <-h.reqs:
		case <-t.C():
			r = request{ev: Tick{Now: h.cfg.Now()}}
		}
		reply := h.apply(ctx, r.ev, goFunc)
		if r.done != nil {
			r.done <- reply
		}
	}
}

// apply steps ev through the machine, publishes the routes after it and
// runs its effects in order: drops here, pulls and resyncs handed to
// start as work of their own, all under ctx. It returns the machine's
// reply. Its caller owns the machine: Run, or an Inline hand-off's
// stepInline under mu.
func (h *Handoff) apply(ctx context.Context, ev Event, start func(func())) Reply {
	old := h.routes.Load()
	effects := h.m.Step(ev)
	var live map[string]string
	if rc, ok := ev.(RingChanged); ok {
		live = rc.Live
	}
	now := h.snapshot(old, live)
	h.routes.Store(now)
	close(old.changed)
	h.logTransitions(ctx, ev, old, now)
	var reply Reply
	for _, e := range effects {
		switch e := e.(type) {
		case Reply:
			reply = e
		case Pull:
			start(func() { h.pull(ctx, e) })
		case Resync:
			if h.resync != nil {
				start(func() { h.resyncReplicas(ctx, e.Parts) })
			}
		case DropCounters:
			h.dropCounters(ctx, e.Parts)
		case DropReplicas:
			h.replicas.Drop(e.Parts)
		}
	}
	return reply
}

// logTransitions logs, at debug level, each partition whose state, peer
// or owner ev changed: the trail to read when a counter went astray.
func (h *Handoff) logTransitions(ctx context.Context, ev Event, old, now *Routes) {
	if !h.cfg.Logger.Enabled(ctx, slog.LevelDebug) || old == nil || len(old.chunks) != len(now.chunks) {
		return
	}
	for i, c := range now.chunks {
		if c == old.chunks[i] {
			continue
		}
		for j := range uint32(h.m.Len() - i*routeChunkLen) {
			if j == routeChunkLen {
				break
			}
			p := uint32(i*routeChunkLen) + j
			o := old.chunks[i]
			if o.state[j] != c.state[j] || o.peer[j] != c.peer[j] || o.owner[j] != c.owner[j] {
				h.cfg.Logger.Debug("partition", "p", p, "event", fmt.Sprintf("%T", ev),
					"from", fmt.Sprintf("%s/%s/%s", o.state[j], o.peer[j], o.owner[j]),
					"to", fmt.Sprintf("%s/%s/%s", c.state[j], c.peer[j], c.owner[j]))
			}
		}
	}
}

// snapshot builds the Routes of the machine's state now, sharing old's
// chunks whose partitions did not change. Ready channels carry over while
// a partition stays pending.
func (h *Handoff) snapshot(old *Routes, live map[string]string) *Routes {
	n := h.m.Len()
	r := &Routes{
		chunks:  make([]*routeChunk, (n+routeChunkLen-1)/routeChunkLen),
		changed: make(chan struct{}),
		live:    live,
	}
	if live == nil && old != nil {
		r.live = old.live
	}
	for i := range r.chunks {
		var was *routeChunk
		if old != nil {
			was = old.chunks[i]
		}
		r.chunks[i] = h.chunk(uint32(i*routeChunkLen), min(routeChunkLen, n-i*routeChunkLen), was)
		r.pending += r.chunks[i].pending
	}
	return r
}

// chunk is the state of the k partitions from first on: was itself if
// none of them changed, else a new chunk (was nil: none before).
func (h *Handoff) chunk(first uint32, k int, was *routeChunk) *routeChunk {
	same := was != nil
	for j := 0; same && j < k; j++ {
		st, peer := h.m.State(first + uint32(j))
		same = st == was.state[j] && peer == was.peer[j] && h.m.Owner(first+uint32(j)) == was.owner[j]
	}
	if same {
		return was
	}
	c := &routeChunk{}
	for j := range k {
		p := first + uint32(j)
		c.state[j], c.peer[j] = h.m.State(p)
		c.owner[j] = h.m.Owner(p)
		var ready chan struct{}
		if was != nil {
			ready = was.ready[j]
		}
		switch {
		case c.state[j] == PartPending && ready != nil:
			c.ready[j] = ready
		case c.state[j] == PartPending:
			c.ready[j] = make(chan struct{})
		case ready != nil:
			close(ready)
		}
		if c.state[j] == PartPending {
			c.pending++
		}
	}
	return c
}

// step hands ev to Run and waits until it was applied (an Inline
// hand-off applies it here).
func (h *Handoff) step(ctx context.Context, ev Event) (Reply, error) {
	if h.cfg.Inline {
		return h.stepInline(ctx, ev)
	}
	r := request{ev: ev, done: make(chan Reply, 1)}
	select {
	case h.reqs <- r:
	case <-ctx.Done():
		return Reply{}, ctx.Err()
	case <-h.stopped:
		return Reply{}, ErrClosed
	}
	return <-r.done, nil
}

// stepInline applies ev on the caller's goroutine, one event at a time
// (under mu). The work its effects start goes to the seam only once the
// event is done, as Run finishes an event before it takes the next: so
// work that the seam runs at once may step again.
func (h *Handoff) stepInline(ctx context.Context, ev Event) (Reply, error) {
	if err := ctx.Err(); err != nil {
		return Reply{}, err
	}
	var work []func()
	h.mu.Lock()
	if h.life.Err() != nil {
		h.mu.Unlock()
		return Reply{}, ErrClosed
	}
	reply := h.apply(h.life, ev, func(f func()) { work = append(work, f) })
	h.mu.Unlock()
	for _, f := range work {
		h.cfg.Sched.Go(f)
	}
	return reply, nil
}

// Tick steps time now: partitions released and replica copies kept past
// Grace are let go, and partitions moved away past Settle are asked back.
// Run does this every TickEvery; an Inline hand-off's caller calls Tick.
func (h *Handoff) Tick(ctx context.Context) error {
	_, err := h.step(ctx, Tick{Now: h.cfg.Now()})
	return err
}

// Close ends an Inline hand-off: every later event fails with ErrClosed
// and the work it started sees its context end. It does not wait for
// that work (a schedtest.Sim runs it when its driver does). A hand-off
// with Run ends with Run's context; there Close does nothing.
func (h *Handoff) Close() {
	if !h.cfg.Inline {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.life.Err() == nil {
		h.end()
		close(h.stopped)
	}
}

// ChangeRing applies a new ring and returns once the routes reflect it
// (partitions gained are pending from then on), so the caller can publish
// the ring to the check path after it. The pulls it needs run on.
func (h *Handoff) ChangeRing(ctx context.Context, ev RingChanged) error {
	if ev.Now == 0 {
		ev.Now = h.cfg.Now()
	}
	_, err := h.step(ctx, ev)
	return err
}

// Serve is the holder's side of a hand-off: it gives req.To the
// partitions it owns now. For each partition this node holds, it passes
// the counters on (later items are forwarded to req.To) and drops them;
// for one it handed on earlier it says to whom, so the puller follows the
// counters there. Replica copies of the asked partitions go along. A
// partition this node is itself still pulling is answered once it arrived,
// unless its pull waits on the asker (see waitsFor).
func (h *Handoff) Serve(ctx context.Context, req HandoffRequest) (HandoffReply, error) {
	if req.To == "" || req.To == h.cfg.Self {
		return HandoffReply{}, fmt.Errorf("%w: puller %q", ErrBadRequest, req.To)
	}
	for _, p := range req.Parts {
		if int(p) >= h.cfg.Partitions {
			return HandoffReply{}, fmt.Errorf("%w: partition %d out of range (%d partitions)", ErrBadRequest, p, h.cfg.Partitions)
		}
	}
	for {
		ready, asks := h.waitsFor(req)
		if ready == nil {
			break
		}
		select {
		case <-ready:
		case <-asks:
		case <-ctx.Done():
			return HandoffReply{}, ctx.Err()
		case <-h.stopped:
			return HandoffReply{}, ErrClosed
		}
	}
	reply, err := h.step(ctx, Ask{Now: h.cfg.Now(), To: req.To, Parts: req.Parts})
	if err != nil {
		return HandoffReply{}, err
	}
	for _, p := range slices.Concat(reply.Held, reply.Copies) {
		h.passedOn[p].Store(true)
	}
	h.cfg.Logger.Debug("asked for partitions", "by", req.To, "parts", req.Parts, "held", reply.Held, "provisional", reply.Copies, "moved", reply.Moved)
	out := HandoffReply{Held: reply.Held, Moved: reply.Moved}
	// The replica copies first: the asker keeps the first state it gets of
	// a counter, and this node's copies are fresher than provisional
	// counters it holds (a flap's leftovers stopped changing when the flap
	// ended; the copies follow the owner that kept serving).
	out.Copies = h.replicas.Peek(req.Parts)
	if passed := slices.Concat(reply.Held, reply.Copies); len(passed) > 0 {
		states, err := h.exportHeld(ctx, passed)
		if err != nil {
			// The puller installs nothing: hold the partitions again.
			if _, berr := h.step(context.WithoutCancel(ctx), HandBack{Now: h.cfg.Now(), To: req.To, Parts: passed}); berr != nil {
				h.cfg.Logger.Warn("hand back after a failed hand-off", "err", berr)
			}
			return HandoffReply{}, err
		}
		provisional := set32(reply.Copies)
		for _, st := range states {
			if provisional[st.Partition] {
				out.Copies = append(out.Copies, st)
			} else {
				out.States = append(out.States, st)
			}
		}
	}
	h.handedOff.Add(uint64(len(out.Held) + len(reply.Copies)))
	h.cfg.Logger.Info("handed off partitions", "to", req.To, "partitions", len(out.Held), "provisional", len(reply.Copies), "states", len(out.States), "moved", len(out.Moved))
	return out, nil
}

// Waits reports whether Serve would wait before it answers req now: for
// a partition this node is itself still pulling (see waitsFor). A
// simulation serves an ask once this is false.
func (h *Handoff) Waits(req HandoffRequest) bool {
	ready, _ := h.waitsFor(req)
	return ready != nil
}

// waitsFor returns the ready channel of a partition of req that Serve
// waits for (nil: it answers now), and a channel closed when a pull's
// asks change (the answer may change then).
//
// A partition this node is still pulling has (mostly) no counters here
// yet: the holder's are on their way, and Serve waits for them so that it
// hands them on. But two pullers may ask each other (a restart and a join
// under delay: the one pulling a partition the other's ring took from
// it is asked by the new owner, while its own pull asks the new owner,
// where a mark or the broadcast sends it), and each waiting for its own
// pull, both asks time out. So a partition whose pull waits on the
// asker's answer, that has got nothing from a holder yet and had no
// counters here when the pull began (Pull.hasCounters), is answered at
// once unless the asker owns it by this node's ring: nothing of it is
// here or on its way here but what the asker itself will answer, so the
// reply names nothing and passes nothing (replica copies only), marks
// nothing, and the pull goes on as it was. The asker settles first (with
// the holder's counters if its pull finds them), then answers this
// node's pull, which waited for it: the counters go one way, to the
// owner when both rings agree on it, and none goes twice. Two pullers
// that each take the other for the owner both wait (as before, until
// the ask's deadline); two that each take neither for it both answer at
// once, and each settles from what its other asks find.
func (h *Handoff) waitsFor(req HandoffRequest) (ready, asks <-chan struct{}) {
	r := h.Routes()
	h.asks.Lock()
	defer h.asks.Unlock()
	for _, p := range req.Parts {
		ch := r.Ready(p)
		if ch == nil || (h.asks.on[p] == req.To && r.owner(p) != req.To) {
			continue
		}
		return ch, h.asks.changed
	}
	return nil, h.asks.changed
}

// asking records that the pull of parts waits on member id's answer (""
// when it has it): see waitsFor.
func (h *Handoff) asking(parts []uint32, id string) {
	h.asks.Lock()
	defer h.asks.Unlock()
	for _, p := range parts {
		if id == "" {
			delete(h.asks.on, p)
		} else {
			h.asks.on[p] = id
		}
	}
	close(h.asks.changed)
	h.asks.changed = make(chan struct{})
}

// exportHeld exports and drops the counters of partitions just handed
// off, once the checks that pinned them here are decided.
func (h *Handoff) exportHeld(ctx context.Context, parts []uint32) ([]State, error) {
	for _, p := range parts {
		// An empty critical section: taking the write lock waits out the
		// pins taken before the partition was published as moved.
		h.fence[p].Lock()
		h.fence[p].Unlock()
	}
	st, err := h.counters.Export(ctx, parts)
	if err != nil {
		return nil, err
	}
	return st, h.counters.Drop(ctx, parts)
}

// pull fetches the counters of partitions this node gained, from wherever
// they are, installs them and steps Arrived.
func (h *Handoff) pull(ctx context.Context, pl Pull) {
	bySource := map[string][]uint32{}
	var local, kept []uint32 // kept: this node's own counters stayed (Keep)
	for _, g := range pl.Gain {
		src := firstSource(h.cfg.Self, g.From)
		if from, ok := h.replicas.From(g.Partition); ok && g.Gone != "" && from == g.Gone {
			src = "" // this node has the gone puller's copies
		}
		if src == "" {
			local = append(local, g.Partition)
			continue
		}
		bySource[src] = append(bySource[src], g.Partition)
	}
	for _, src := range slices.Sorted(maps.Keys(bySource)) { // a fixed order of asks
		parts := bySource[src]
		f := h.fetch(ctx, src, parts, pl.hasCounters)
		if h.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
			h.cfg.Logger.Debug("pulled", "source", src, "back", pl.Back, "keep", pl.Keep, "parts", parts,
				"held", slices.Sorted(maps.Keys(f.held)), "orphans", f.orphans(parts), "reached", slices.Sorted(maps.Keys(f.reached)))
		}
		if pl.Back && !f.reached[src] && !bug.On(bug.TakebackUnreachable) {
			// A take-back whose holder did not answer (a link down, not a
			// death gossip declared): its counters are still there, and
			// this node's copies may be old or missing. Try again later.
			var unreached []uint32
			parts = slices.DeleteFunc(parts, func(p uint32) bool {
				if f.held[p] {
					return false
				}
				unreached = append(unreached, p)
				return true
			})
			// Their replica copies stay out of the install: the partitions
			// go back to moved to src, and copies imported here would be
			// counters of a partition this node does not hold, replicated
			// as its own (the simulator's InvInstallPending,
			// sim/testdata/fixed-takeback-unreached-copies.txt).
			gone := set32(unreached)
			f.copies = slices.DeleteFunc(f.copies, func(st State) bool { return gone[st.Partition] })
			h.unreached.Add(uint64(len(unreached)))
			h.cfg.Logger.Warn("take-back: the holder did not answer; the partitions stay with it and are asked for again later", "holder", src, "partitions", len(unreached))
			if _, err := h.step(ctx, Unreached{Now: h.cfg.Now(), Peer: src, Parts: unreached}); err != nil && ctx.Err() == nil {
				h.cfg.Logger.Warn("return unreached partitions", "err", err)
			}
			if len(parts) == 0 {
				continue
			}
		}
		if pl.Keep {
			// Only what a holder handed over replaces this node's counters;
			// the ones it keeps are provisional (as below), and the copies
			// fill in the keys it has no counter of (fillIn).
			got := slices.DeleteFunc(slices.Clone(parts), func(p uint32) bool { return !f.held[p] })
			own := slices.DeleteFunc(slices.Clone(parts), func(p uint32) bool { return f.held[p] })
			h.arrived(ctx, parts, own, func() error {
				if err := h.install(ctx, got, f.handed); err != nil {
					return err
				}
				return h.fillIn(ctx, own, f.copies)
			})
			kept = append(kept, own...)
			continue
		}
		states, orphans := f.states(), f.orphans(parts)
		got := slices.DeleteFunc(slices.Clone(parts), func(p uint32) bool { return slices.Contains(orphans, p) })
		copied := slices.DeleteFunc(slices.Clone(got), func(p uint32) bool { return f.held[p] })
		// Copies src itself sent this node are the freshest there are
		// when src did not answer (it died since the pull began): they
		// come first, as Import keeps the first state of a counter.
		// Others' copies may be kept past their placement, older. (An
		// answering src's own counters, provisional ones passed as
		// copies, are fresher than what it sent before.)
		if !f.reached[src] {
			mine := slices.DeleteFunc(slices.Clone(copied), func(p uint32) bool { from, ok := h.replicas.From(p); return !ok || from != src })
			states = append(h.replicas.Peek(mine), states...)
		}
		h.arrived(ctx, got, copied, func() error {
			h.replicas.Drop(got)
			return h.installPulled(ctx, pl, parts, f.held, states)
		})
		local = append(local, orphans...)
	}
	switch {
	case len(local) == 0:
	case pl.Keep:
		// Nobody else holds them: this node's counters stay, provisional.
		// They are its side's of a split, and a base ring lists only the
		// members this node sees again: one the others kept serving may
		// come back into its view a ring later (gossip brings them back
		// one by one), and its counters are the ones that count. Held as
		// a holder's, these went to a later puller over fresher ones
		// (sim/testdata/fixed-regained-alone.txt: 1.6 s between the two
		// members, a cold key 2 over 26 s later).
		h.arrived(ctx, local, local, nil)
		kept = append(kept, local...)
	default:
		// Promote this node's replica copies (no live node holds them).
		states := h.replicas.Take(local)
		h.cfg.Logger.Debug("promoted replica copies", "parts", local, "states", len(states))
		h.promoted.Add(uint64(len(states)))
		h.arrived(ctx, local, local, func() error { return h.installPulled(ctx, pl, local, nil, states) })
	}
	if len(kept) > 0 && h.resync != nil {
		// Nothing was installed for these, so nothing was shipped, and a
		// replica by this ring may hold no copy (it promoted its copies
		// while it was cut off, or it was not a replica by the ring this
		// node had: sim/testdata/fixed-restart-mark.txt once both sides of
		// its split came back with a base). Sent once every source was
		// asked, not between two sources' asks.
		h.resyncReplicas(ctx, kept)
	}
}

// fillIn imports the copies of the partitions a pull with Keep kept, for
// the keys this node has no counter of (Import keeps a counter it finds,
// so this node's own stay). A holder that gave way itself passes its
// counters as copies and drops them: dropped here too, a key whose only
// counter it was came back from a full bucket (traced 2026-12-02,
// TestClusterBackToBackJoinsKeepCounters at load 10: n1 passed
// apikey:j7's counter to n2, which had given way and pulled with Keep;
// TestKeepPullFillsInKeysItLacks). A copy older than the line it stands
// for only refuses more, never admits more, than no counter at all.
func (h *Handoff) fillIn(ctx context.Context, kept []uint32, copies []State) error {
	if bug.On(bug.KeepDropsCopies) {
		return nil
	}
	in := set32(kept)
	states := slices.DeleteFunc(slices.Clone(copies), func(st State) bool { return !in[st.Partition] })
	if len(states) == 0 {
		return nil
	}
	ctx, cancel := h.cfg.Sched.WithTimeout(ctx, h.cfg.InstallTimeout)
	defer cancel()
	return h.counters.Import(ctx, states)
}

// hasCounters reports whether this node may have counters of p while it
// pulls it: ones it still held (Held), or its own coming back from a
// split (Keep). Serve never answers for such a partition before its
// pull has landed (see waitsFor).
func (pl Pull) hasCounters(p uint32) bool { return pl.Keep || slices.Contains(pl.Held, p) }

// installPulled installs what was pulled for parts. The counters of those
// pl.Held lists that no holder handed over (this node's leftovers, see
// Pull.Held) stay only for the keys the pulled copies do not carry:
// Import keeps a counter it finds, so they are exported and imported
// again after the copies. (They were kept whole, so a released side's
// stale leftovers won over the dead owner's fresher copies: the
// simulator, sim/testdata/fixed-held-leftovers.txt.)
func (h *Handoff) installPulled(ctx context.Context, pl Pull, parts []uint32, handed map[uint32]bool, states []State) error {
	kept := slices.DeleteFunc(slices.Clone(parts), func(p uint32) bool { return !slices.Contains(pl.Held, p) || handed[p] })
	var left []State
	if len(kept) > 0 {
		var err error
		if left, err = h.counters.Export(ctx, kept); err != nil {
			return err
		}
	}
	if err := h.install(ctx, parts, states); err != nil || len(left) == 0 {
		return err
	}
	return h.counters.Import(ctx, left)
}

// arrived installs what was pulled for parts (when install is not nil;
// a failure is logged, and the partitions are settled anyway: waiting on
// would stall their checks for good) and steps Arrived. copied lists the
// parts no holder handed over.
func (h *Handoff) arrived(ctx context.Context, parts, copied []uint32, install func() error) {
	if install != nil {
		if err := install(); err != nil {
			h.cfg.Logger.Warn("install pulled partitions", "err", err)
		}
	}
	if len(parts) == 0 {
		return
	}
	if _, err := h.step(ctx, Arrived{Now: h.cfg.Now(), Parts: parts, Copies: copied}); err != nil && ctx.Err() == nil {
		h.cfg.Logger.Warn("settle pulled partitions", "err", err)
	}
}

// fetched is what fetch collected: the partitions holders handed over
// (held) with their counters (handed), and replica copies.
type fetched struct {
	held    map[uint32]bool
	handed  []State
	copies  []State
	reached map[string]bool // the members that answered
}

// states is the holders' counters plus, for the partitions no holder
// answered for, the freshest replica copies seen.
func (f fetched) states() []State {
	out := slices.Clone(f.handed)
	for _, st := range f.copies {
		if !f.held[st.Partition] {
			out = append(out, st)
		}
	}
	return out
}

// orphans lists the partitions of parts that no holder handed over and no
// replica copy covers (the caller promotes its own copies, if any).
func (f fetched) orphans(parts []uint32) []uint32 {
	copied := map[uint32]bool{}
	for _, st := range f.copies {
		copied[st.Partition] = true
	}
	var out []uint32
	for _, p := range parts {
		if !f.held[p] && !copied[p] {
			out = append(out, p)
		}
	}
	return out
}

// fetch collects the counters of parts, asking src first. The node that
// holds a partition hands it over; a node that handed it on names the next
// holder, which is asked in turn (the chain a run of ring changes leaves
// when this node's ring skipped one of them). A partition nobody named is
// asked of every other live member. Replica copies of the asked
// partitions come along, for those no live node holds.
//
// A node asked already is not asked again for the partition (two marks
// pointing at each other would send the asks round), unless it answered
// nothing for it and a mark names it since: it has pulled the partition
// after it answered (it had not yet seen the ring that gave it the
// partition), so it holds the counters now.
func (h *Handoff) fetch(ctx context.Context, src string, parts []uint32, here func(uint32) bool) fetched {
	asked := map[uint32][]string{}
	empty := map[uint32][]string{} // who answered nothing for the partition
	// mine: a mark names this node itself, and this process never handed
	// the partition on, so the counters went to an earlier incarnation of
	// it and died with it. A holder the asks to every member find then
	// holds counters that were never on that chain (leftovers a view
	// fault or a split left released, which their owner never pulled: it
	// kept serving): they count as copies, after the copies of the
	// earlier incarnation's line already got. (Had this process handed
	// the partition on, and forgotten the mark, the holder found is the
	// next on its chain.)
	mine := map[uint32]bool{}
	// copied: copies of the partition came before the asks to every
	// member. A holder those find is off the chain as well (no source and
	// no mark led to it): leftovers a view fault left released, which
	// their owner never pulled, while the copies follow the line that
	// kept deciding (one that passed its counters as provisional copies,
	// or the replicas of a dead owner). They count as copies too, after
	// those (sim/testdata/fixed-view-leftovers.txt, once a take-back from
	// copies made the partition's only holder provisional). Unless a mark
	// names this node and this process handed the partition on (ours):
	// the holder found is then the next on its own chain.
	copied, ours := map[uint32]bool{}, map[uint32]bool{}
	held := map[uint32]bool{}
	reached := map[string]bool{}
	var states, copies []State
	ask := map[string][]uint32{src: parts}
	var unnamed []uint32 // asked, and nobody has said where they are
	broadcast := false
	offChain := func(p uint32) bool { return mine[p] || (broadcast && copied[p] && !ours[p]) }
	for len(ask) > 0 {
		next := map[string][]uint32{}
		for _, dest := range slices.Sorted(maps.Keys(ask)) { // a fixed order of asks
			ps := ask[dest]
			for _, p := range ps {
				asked[p] = append(asked[p], dest)
			}
			waiting := slices.DeleteFunc(slices.Clone(ps), func(p uint32) bool { return held[p] || here(p) })
			h.asking(waiting, dest)
			resp, err := h.askPeer(ctx, dest, ps)
			h.asking(waiting, "")
			if err != nil {
				h.cfg.Logger.Warn("hand-off request failed", "from", dest, "partitions", len(ps), "err", err)
				unnamed = append(unnamed, ps...)
				continue
			}
			reached[dest] = true
			copies = append(copies, resp.Copies...)
			for _, p := range resp.Held {
				if !offChain(p) || bug.On(bug.OffChainHolder) {
					held[p] = true
				}
			}
			for _, st := range resp.States {
				if offChain(st.Partition) && !bug.On(bug.OffChainHolder) {
					copies = append(copies, st)
				} else {
					states = append(states, st)
				}
			}
			if !broadcast {
				for _, st := range resp.Copies {
					copied[st.Partition] = true
				}
			}
			named, moved := map[uint32]bool{}, map[uint32]bool{}
			for _, m := range resp.Moved {
				p := m.Partition
				if m.To == h.cfg.Self && !held[p] {
					if h.passedOn[p].Load() {
						ours[p] = true
					} else {
						mine[p] = true
					}
				}
				moved[p] = true
				again := slices.Contains(empty[p], m.To) // it pulled p since
				if m.To != h.cfg.Self && (again || !slices.Contains(asked[p], m.To)) && len(asked[p]) < h.cfg.MaxAsks {
					next[m.To] = append(next[m.To], p)
					named[p] = true
					empty[p] = slices.DeleteFunc(empty[p], func(id string) bool { return id == m.To })
				}
			}
			for _, p := range ps {
				if !held[p] && !moved[p] {
					empty[p] = append(empty[p], dest)
				}
				if !held[p] && !named[p] {
					unnamed = append(unnamed, p)
				}
			}
		}
		if len(next) == 0 && len(unnamed) > 0 && !broadcast {
			// Nobody said where these went: ask everyone not asked yet.
			broadcast = true
			for _, id := range slices.Sorted(maps.Keys(h.Routes().live)) {
				if id == h.cfg.Self {
					continue
				}
				for _, p := range unnamed {
					if !held[p] && !slices.Contains(asked[p], id) {
						next[id] = append(next[id], p)
					}
				}
			}
		}
		ask = next
	}
	return fetched{held: held, handed: states, copies: copies, reached: reached}
}

// askPeer sends one hand-off request to the member id, at the address the
// latest ring gave it.
func (h *Handoff) askPeer(ctx context.Context, id string, parts []uint32) (HandoffReply, error) {
	addr, ok := h.Routes().live[id]
	if !ok || addr == "" {
		return HandoffReply{}, fmt.Errorf("member %q is not live", id)
	}
	ctx, cancel := h.cfg.Sched.WithTimeout(ctx, h.cfg.AskTimeout)
	defer cancel()
	return h.peers.Handoff(ctx, addr, HandoffRequest{To: h.cfg.Self, Parts: parts})
}

// install drops the counters of parts (whatever the engine still holds for
// them is from an earlier time this node served them, and older than what
// the previous holder sent), then imports states.
func (h *Handoff) install(ctx context.Context, parts []uint32, states []State) error {
	ctx, cancel := h.cfg.Sched.WithTimeout(ctx, h.cfg.InstallTimeout)
	defer cancel()
	if err := h.counters.Drop(ctx, parts); err != nil {
		return err
	}
	return h.counters.Import(ctx, states)
}

func (h *Handoff) dropCounters(ctx context.Context, parts []uint32) {
	ctx, cancel := h.cfg.Sched.WithTimeout(ctx, h.cfg.InstallTimeout)
	defer cancel()
	if err := h.counters.Drop(ctx, parts); err != nil && ctx.Err() == nil {
		h.cfg.Logger.Warn("drop counters of partitions let go", "err", err)
	}
	h.cfg.Logger.Info("let go of partitions' counters", "partitions", len(parts))
}

// resyncReplicas sends the full state of partitions this node still owns
// to their replicas after the ring gave them a new one (which would
// otherwise get only the counters that change from now on). One partition
// at a time goes through the replicator, ordered with the change stream;
// a partition that moved on meanwhile is skipped.
func (h *Handoff) resyncReplicas(ctx context.Context, parts []uint32) {
	total := 0
	for _, p := range parts {
		for attempt := 0; ; attempt++ {
			if r := h.Routes(); !r.ownedReady(p, h.cfg.Self) {
				break
			}
			rctx, cancel := h.cfg.Sched.WithTimeout(ctx, h.cfg.InstallTimeout)
			k, err := h.resync.Resync(rctx, func(ctx context.Context) ([]State, error) {
				return h.counters.Export(ctx, []uint32{p})
			})
			cancel()
			if errors.Is(err, ErrQueueFull) && attempt < 100 {
				t := h.cfg.Sched.NewTimer(h.cfg.ResyncRetry)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C():
				}
				continue
			}
			if err != nil {
				if ctx.Err() == nil {
					h.cfg.Logger.Warn("replica resync failed", "partition", p, "err", err)
				}
				break
			}
			total += k
			break
		}
	}
	h.resynced.Add(uint64(total))
	h.cfg.Logger.Info("resynced new replicas", "partitions", len(parts), "states", total)
}

func set32(ps []uint32) map[uint32]bool {
	out := make(map[uint32]bool, len(ps))
	for _, p := range ps {
		out[p] = true
	}
	return out
}
