package replication

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirlimit/weir/internal/bug"
	"github.com/weirlimit/weir/internal/sched"
)

// Transport ships states to one peer. The node implements it with the peer
// gRPC Replicate call (and Streams with Peer.ReplicateStream). It must
// honour ctx, must not retain states after it returns, and may be called
// concurrently for different destinations (never concurrently for the
// same one).
type Transport interface {
	Replicate(ctx context.Context, to string, from string, states []State) error
}

// Placement returns the nodes that hold replicas of a partition, excluding
// the local node (which is filtered out anyway). It is called afresh at every
// flush, so the caller may swap rings underneath; it must not block. The
// Replicator only reads the slice returned, so it may be shared.
type Placement func(partition uint32) []string

// ReplStats is a snapshot of a Replicator's progress.
type ReplStats struct {
	// Pending counts changes not yet acknowledged: once per counter id in the
	// inbox, plus once per destination copy waiting for or in a send.
	Pending int
	// Sent and Failed count state copies acknowledged by, or refused by
	// (error or timeout), a destination. A refused copy is retried at the
	// next flush unless a newer change replaced it.
	Sent, Failed uint64
	// Dropped counts changes given up because a queue was full.
	Dropped uint64
	// Lag is the age of the oldest change not yet acknowledged by every
	// destination it was placed on; 0 when everything is shipped.
	Lag time.Duration
	// LastSuccess is, per destination with recent traffic, when its last
	// send succeeded (zero if none has yet).
	LastSuccess map[string]time.Time
}

// forgetAfter is how long an idle destination (nothing queued or in flight)
// is remembered, so destinations of departed nodes do not pile up.
const forgetAfter = time.Minute

// Replicator ships counter states from this owner to the partitions'
// replicas. Enqueue is safe from any goroutine; Run is the one goroutine
// that owns the destinations' queues (in an Inline replicator, whoever
// holds own: Flush, or a send recording its result).
type Replicator struct {
	cfg   Config
	t     Transport
	place Placement
	// streams is t when it has Streams (Run's pipelined streams).
	streams Streams
	log     *slog.Logger
	now     func() time.Time
	// kick wakes Run: the first change after a quiet spell (active was
	// false), or MaxBatch changes waiting.
	kick chan struct{}

	mu  sync.Mutex // guards cur, sealed and active; held for O(batch) in Enqueue, O(1) in flush and Stats
	cur *inbox
	// sealed are earlier generations of the inbox, each bound to the
	// placement of the ring its changes were decided on (Seal), oldest
	// first.
	sealed []sealedInbox
	// active is set by the change that finds Run quiet (its timer not
	// armed) and cleared by Run when it disarms: only that change wakes Run.
	active bool
	// flushMu keeps flushes out while Resync reads and queues a snapshot.
	// Lock order: own before flushMu before mu.
	flushMu sync.Mutex
	// own is an Inline replicator's owner of what Run owns otherwise.
	own sync.Mutex

	running     atomic.Bool
	sent        atomic.Uint64
	failed      atomic.Uint64
	dropped     atomic.Uint64
	flushOldest atomic.Int64 // oldest change taken out of the inbox and not yet queued per destination
	flushLen    atomic.Int64 // how many such changes
	destOldest  atomic.Int64 // oldest change queued or in flight for any destination
	destPending atomic.Int64

	statsMu     sync.Mutex
	lastSuccess map[string]time.Time

	// Owned by the goroutine in Run (under own in an Inline replicator).
	spare   *inbox
	dests   map[string]*dest
	ids     []string            // the keys of dests, sorted: the order of sends
	places  map[uint32][]string // per-flush Placement cache
	sends   []outgoing          // what flush returns, reused
	results chan result
	wg      sync.WaitGroup
	events  chan event // Run's streams: opens done, acknowledgements, failures
	live    int        // Run's openers and stream readers not yet joined
}

// sealedInbox is an inbox generation shipped by the placement it was
// sealed with.
type sealedInbox struct {
	b     *inbox
	place Placement
}

// dest is one destination's queue; owned by Run.
type dest struct {
	id             string
	pending        []State        // newest state per id, not yet sent, in order of first change
	at             map[uint64]int // counter id -> index in pending
	pendingOldest  int64
	inflight       int // states in the one outstanding send; 0 when none
	inflightOldest int64
	retried        bool // pending holds refused states: re-check placement before resending
	failing        bool
	lastActive     int64

	// Run's stream to the destination (see pipeline.go); inflight and
	// inflightOldest then count the states of unacked.
	stream   Stream
	opening  bool        // an OpenStream is under way
	draining bool        // the last stream failed and its reader has not ended yet
	seq      uint64      // of the last batch sent on stream
	unacked  []sentBatch // sent on stream, not yet acknowledged, oldest first
	asked    uint64      // seq of the batch whose acknowledgement is awaited; 0: none
	askedAt  int64       // when it was sent
	lastAsk  int64       // when the last batch asking for one was sent
}

type result struct {
	d      *dest
	sent   int
	failed []State // unsent remainder when err != nil
	err    error
}

// outgoing is one send a flush decided on: batch for d, which has no
// other send in flight.
type outgoing struct {
	d     *dest
	batch []State
}

// NewReplicator checks cfg and returns a Replicator; call Run to ship
// (Flush, when cfg.Inline).
func NewReplicator(cfg Config, t Transport, p Placement) (*Replicator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if t == nil || p == nil {
		return nil, fmt.Errorf("%w: Transport and Placement are required", ErrNilDependency)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Sched = sched.Or(cfg.Sched)
	if cfg.Now == nil {
		cfg.Now = cfg.Sched.Now
	}
	streams, _ := t.(Streams)
	return &Replicator{
		cfg:         cfg,
		t:           t,
		streams:     streams,
		place:       p,
		log:         cfg.Logger,
		now:         cfg.Now,
		kick:        make(chan struct{}, 1),
		cur:         newInbox(),
		spare:       newInbox(),
		lastSuccess: make(map[string]time.Time),
		dests:       make(map[string]*dest),
		places:      make(map[uint32][]string),
		results:     make(chan result),
		events:      make(chan event),
	}, nil
}

// Enqueue records changed counter states for shipping. It never blocks on
// Run or the network: it copies what it keeps (Log included), coalesces by
// counter id until the next flush (the latest state wins), and when
// QueueLen distinct ids are waiting it evicts the oldest one and counts it
// in Dropped. It may be called concurrently and while Run is not running.
func (r *Replicator) Enqueue(states []State) {
	if len(states) == 0 {
		return
	}
	since := r.now().UnixNano()
	var evicted uint64
	r.mu.Lock()
	b := r.cur
	for i := range states {
		if b.push(&states[i], since, r.cfg.QueueLen) {
			evicted++
		}
	}
	wake := r.queuedLocked()
	r.mu.Unlock()
	if evicted > 0 {
		r.dropped.Add(evicted)
	}
	if wake {
		r.wake()
	}
}

// queuedLocked notes that changes were queued (mu held) and reports whether
// Run must be woken: it is quiet, or MaxBatch changes are waiting.
func (r *Replicator) queuedLocked() bool {
	wake := !r.active || r.waitingLocked() >= r.cfg.MaxBatch
	r.active = true
	return wake
}

// waitingLocked counts the changes in the inbox, sealed generations
// included (mu held).
func (r *Replicator) waitingLocked() int {
	n := r.cur.n
	for _, s := range r.sealed {
		n += s.b.n
	}
	return n
}

// Seal binds the changes queued so far to place, the placement of the
// ring they were decided on: the next flush ships them to its replicas,
// not to those of the ring it reads then. A node calls it with its old
// ring's placement before its hand-off takes a new ring (what the
// hand-off then installs goes by the new one). Without it a change
// decided just before a ring change went to the new ring's replicas (the
// new owner among them), and the old ones, which a take-back asks when
// the new owner dies before it installed the hand-off, lacked it (the
// simulator, sim/testdata/fixed-recut-change.txt). Changes decided after
// the swap go by the placement of the flush, as before: the new owner
// pulls the partition's counters anyway, and the new ring's replicas get
// its resync.
func (r *Replicator) Seal(place Placement) {
	if place == nil || bug.On(bug.RecutChange) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur.n == 0 {
		return
	}
	r.sealed = append(r.sealed, sealedInbox{b: r.cur, place: place})
	r.cur = newInbox()
}

func (r *Replicator) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Flush ships what is pending now, in an Inline replicator (in place of
// Run's ticker): it moves the inbox into the destinations' queues and
// starts through Config.Sched, in the order of the destinations' ids, a
// send for each one that has none in flight and states waiting. Each send
// records its result when it returns (with a schedtest.Sim, when its
// driver runs the queued work): what a destination refused waits for a
// later Flush. The sends run under ctx. ErrRunning without Config.Inline.
func (r *Replicator) Flush(ctx context.Context) error {
	if !r.cfg.Inline {
		return fmt.Errorf("%w: Run flushes this replicator (Flush needs Config.Inline)", ErrRunning)
	}
	r.own.Lock()
	sends := slices.Clone(r.flush())
	clear(r.sends)
	r.own.Unlock()
	// Started once own is free: a seam that runs work at once finishes
	// it here.
	r.start(ctx, sends, func(res result) {
		r.own.Lock()
		defer r.own.Unlock()
		r.finish(res)
	})
	return nil
}

// start starts each send through the seam, as concurrent work that hands
// its result to done; the batches are the sends' from then on.
func (r *Replicator) start(ctx context.Context, sends []outgoing, done func(result)) {
	for _, o := range sends {
		r.wg.Add(1)
		r.cfg.Sched.Go(func() {
			defer r.wg.Done()
			done(r.send(ctx, o))
		})
	}
	clear(sends)
}

// flush moves the inbox into the destinations' queues and returns a send
// for every destination that has none in flight and states waiting, in
// the order of the destinations' ids, each batch in the order of its
// counters' first change (the caller starts them; each one's result goes
// to finish). The slice is valid until the next flush.
func (r *Replicator) flush() []outgoing {
	r.intake()
	sends := r.sends[:0]
	for _, id := range r.ids {
		d := r.dests[id]
		if d.inflight > 0 || len(d.pending) == 0 {
			continue
		}
		batch := r.take(d, len(d.pending))
		if len(batch) > 0 {
			d.inflight, d.inflightOldest = len(batch), d.pendingOldest
			sends = append(sends, outgoing{d: d, batch: batch})
		}
		if len(d.pending) == 0 {
			d.reset()
		}
	}
	r.publish()
	r.flushOldest.Store(0)
	r.flushLen.Store(0)
	r.sends = sends
	return sends
}

// take removes the first n states waiting for d and returns them (fewer
// when some were refused earlier and their partition has moved away from
// d meanwhile). d.pendingOldest and d.retried are left as they were: the
// caller resets d once its queue is empty.
func (r *Replicator) take(d *dest, n int) []State {
	batch := make([]State, 0, n)
	for _, st := range d.pending[:n] {
		if d.retried && !r.placedAt(st.Partition, d.id) {
			continue // the partition moved away while the send was failing
		}
		batch = append(batch, st)
	}
	rest := copy(d.pending, d.pending[n:])
	clear(d.pending[rest:])
	d.pending = d.pending[:rest]
	clear(d.at)
	for i, st := range d.pending {
		d.at[st.ID] = i
	}
	return batch
}

// intake moves the inbox into the destinations' queues and forgets
// destinations idle for forgetAfter; it returns the time it read (unix
// ns). Run's owner (or own) only. flushOldest and flushLen still cover
// what it moved: the caller clears them once it has published.
func (r *Replicator) intake() int64 {
	now := r.now().UnixNano()
	r.flushMu.Lock()
	r.mu.Lock()
	b := r.cur
	r.cur, r.spare = r.spare, b
	sealed := r.sealed
	r.sealed = nil
	oldest, n := b.oldest(), b.n
	for _, s := range sealed {
		oldest, n = minTime(oldest, s.b.oldest()), n+s.b.n
	}
	r.flushOldest.Store(oldest)
	r.flushLen.Store(int64(n))
	r.mu.Unlock()
	r.flushMu.Unlock()

	clear(r.places)
	// Sealed generations first: a change of the same counter that is
	// newer goes after it in a destination's queue, where the newest wins.
	for _, s := range sealed {
		places := map[uint32][]string{}
		r.queue(s.b, func(p uint32) []string {
			to, ok := places[p]
			if !ok {
				to = r.without(s.place(p))
				places[p] = to
			}
			return to
		}, now)
	}
	r.queue(b, r.placement, now)

	kept := r.ids[:0]
	for _, id := range r.ids {
		d := r.dests[id]
		if d.inflight == 0 && len(d.pending) == 0 && !d.opening && now-d.lastActive > int64(forgetAfter) {
			if d.stream != nil {
				d.stream.Close() // its reader's report is then ignored
				d.stream = nil
			}
			delete(r.dests, id)
			r.statsMu.Lock()
			delete(r.lastSuccess, id)
			r.statsMu.Unlock()
			continue
		}
		kept = append(kept, id)
	}
	clear(r.ids[len(kept):])
	r.ids = kept
	return now
}

// queue moves the changes of b into the queues of the destinations place
// gives their partitions, and empties b.
func (r *Replicator) queue(b *inbox, place func(uint32) []string, now int64) {
	var dropped uint64
	for i := 0; i < b.n; i++ {
		sl := b.at(i)
		for _, to := range place(sl.st.Partition) {
			d := r.dests[to]
			if d == nil {
				d = &dest{id: to, at: make(map[uint64]int)}
				r.dests[to] = d
				i, _ := slices.BinarySearch(r.ids, to)
				r.ids = slices.Insert(r.ids, i, to)
			}
			d.lastActive = now
			if !d.add(sl.st, sl.since, r.cfg.QueueLen) {
				dropped++
			}
		}
	}
	b.reset()
	if dropped > 0 {
		r.dropped.Add(dropped)
	}
}

// placement returns the partition's destinations without Self, cached for
// the current flush.
func (r *Replicator) placement(p uint32) []string {
	if to, ok := r.places[p]; ok {
		return to
	}
	to := r.without(r.place(p))
	r.places[p] = to
	return to
}

// without returns to without Self (and empty ids), to itself if it has
// neither.
func (r *Replicator) without(to []string) []string {
	if slices.ContainsFunc(to, func(id string) bool { return id == r.cfg.Self || id == "" }) {
		to = slices.DeleteFunc(slices.Clone(to), func(id string) bool { return id == r.cfg.Self || id == "" })
	}
	return to
}

func (r *Replicator) placedAt(p uint32, id string) bool {
	for _, to := range r.placement(p) {
		if to == id {
			return true
		}
	}
	return false
}

// add queues st (replacing a waiting state of its id, which keeps its
// place) unless the queue is full of other ids.
func (d *dest) add(st State, since int64, maxLen int) bool {
	if i, ok := d.at[st.ID]; ok {
		d.pending[i] = st
	} else if len(d.pending) >= maxLen {
		return false
	} else {
		d.at[st.ID] = len(d.pending)
		d.pending = append(d.pending, st)
	}
	d.pendingOldest = minTime(d.pendingOldest, since)
	return true
}

// waiting reports whether a state of counter id waits for d.
func (d *dest) waiting(id uint64) bool {
	_, ok := d.at[id]
	return ok
}

// reset empties d's queue, keeping its memory.
func (d *dest) reset() {
	clear(d.pending)
	d.pending = d.pending[:0]
	clear(d.at)
	d.pendingOldest, d.retried = 0, false
}

// send ships one flush's batch to its destination, at most MaxBatch
// states a call, and returns the outcome for finish. Run (or Flush)
// starts it as concurrent work, one per destination at a time; it reads
// only o.d.id, which never changes.
func (r *Replicator) send(ctx context.Context, o outgoing) result {
	res, batch := result{d: o.d}, o.batch
	for len(batch) > 0 {
		n := min(len(batch), r.cfg.MaxBatch)
		sctx, cancel := r.cfg.Sched.WithTimeout(ctx, r.cfg.SendTimeout)
		err := r.t.Replicate(sctx, o.d.id, r.cfg.Self, batch[:n])
		cancel()
		if err != nil {
			res.err, res.failed = err, batch
			break
		}
		res.sent += n
		batch = batch[n:]
	}
	return res
}

// finish records a send's outcome; refused states go back to the queue
// unless a newer state for the same id is already waiting.
func (r *Replicator) finish(res result) {
	d := res.d
	since := d.inflightOldest
	d.inflight, d.inflightOldest = 0, 0
	if res.err == nil {
		r.succeeded(d, res.sent)
		r.publish()
		return
	}
	r.sent.Add(uint64(res.sent))
	r.refused(d, len(res.failed), res.err)
	var dropped uint64
	for _, st := range res.failed {
		if d.waiting(st.ID) {
			continue
		}
		if !d.add(st, since, r.cfg.QueueLen) {
			dropped++
		}
	}
	// The refused changes stay unshipped even where a newer one replaced them.
	d.pendingOldest = minTime(d.pendingOldest, since)
	d.retried = true
	if dropped > 0 {
		r.dropped.Add(dropped)
	}
	r.publish()
}

// publish exposes Run's view for Stats.
func (r *Replicator) publish() {
	var oldest, pending int64
	for _, d := range r.dests {
		oldest = minTime(oldest, d.pendingOldest)
		oldest = minTime(oldest, d.inflightOldest)
		pending += int64(len(d.pending) + d.inflight)
	}
	r.destOldest.Store(oldest)
	r.destPending.Store(pending)
}

// Stats returns a snapshot; safe from any goroutine.
func (r *Replicator) Stats() ReplStats {
	r.mu.Lock()
	n, oldest := r.waitingLocked(), r.cur.oldest()
	for _, s := range r.sealed {
		oldest = minTime(oldest, s.b.oldest())
	}
	n += int(r.flushLen.Load())
	oldest = minTime(oldest, r.flushOldest.Load())
	r.mu.Unlock()
	oldest = minTime(oldest, r.destOldest.Load())
	s := ReplStats{
		Pending: n + int(r.destPending.Load()),
		Sent:    r.sent.Load(),
		Failed:  r.failed.Load(),
		Dropped: r.dropped.Load(),
	}
	if oldest != 0 {
		s.Lag = max(0, time.Duration(r.now().UnixNano()-oldest))
	}
	r.statsMu.Lock()
	s.LastSuccess = make(map[string]time.Time, len(r.lastSuccess))
	for id, t := range r.lastSuccess {
		s.LastSuccess[id] = t
	}
	r.statsMu.Unlock()
	return s
}

// minTime is the earlier of two unix-ns stamps where 0 means "none".
func minTime(a, b int64) int64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}
