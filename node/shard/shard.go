package shard

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/internal/sched"
	"github.com/weirlimit/weir/replication"
)

type opKind uint8

const (
	opCheck opKind = iota
	opExport
	opImport
	opDrop
	opSnapshot
	opPermits
)

// request is what travels on a shard's channel. The sender fills it, the
// holder of the shard's lock decides it, writes out/states/err and sends on done
// (buffered, so the shard never blocks on a caller that gave up).
type request struct {
	op     opKind
	ctx    context.Context
	items  []Item
	pos    []int // index in the caller's items of each item (multi-shard Check)
	out    []Result
	parts  []uint32
	states []replication.State
	held   map[string]int64 // opPermits: live permits by rule
	err    error
	done   chan struct{}
}

// logEntry is one sliding_log counter, or (permits) one concurrency
// counter's permit list (bucket.TakePermit), which is kept beside the logs
// and reported in replication.State.Permits instead of Log.
type logEntry struct {
	log     []int64
	idle    int64
	tag     uint16 // rule tag and volatile bit (ruleTags)
	permits bool
}

// part holds one partition's counters. Only the holder of its shard's lock
// touches it.
type part struct {
	t    table
	logs map[uint64]logEntry // nil unless the partition has sliding_log counters
}

func (p *part) live() int { return p.t.n + len(p.logs) }

type dirtyKey struct {
	id  uint64
	log bool
}

type dirtyRef struct {
	pid uint32
	dirtyKey
}

// tentative is a group member's counter evaluated on a copy.
type tentative struct {
	pid     uint32
	key     dirtyKey
	existed bool
	s       bucket.State
	lg      []int64
	idle    int64
	tag     uint16 // rule tag to give the counter (0: keep what it has)
	vol     bool   // Item.Volatile
	old     logEntry
	permits bool // lg is a permit list
}

type shard struct {
	sched       sched.Sched
	now         func() int64
	onChange    func([]replication.State)
	maxBatch    int
	sweepEvery  time.Duration
	sweepBudget int
	sweepPass   time.Duration
	importIdle  int64
	snapMinIdle int64
	rel         *releaser
	maxKeys     int64 // Config.MaxKeys
	nShards     int64

	in   chan *request // requests waiting for the lock (bounded: QueueLen)
	kick chan struct{} // wakes the shard goroutine to decide what callers left queued

	// mu is the shard's single thread of execution: whoever holds it
	// (a caller's goroutine, or the shard goroutine for sweeps and
	// left-over batches) owns the fields below. It is taken with TryLock
	// on the decision path (a busy shard is joined through in, not waited
	// for), with Lock only by the shard goroutine and an Inline engine.
	// A goroutine holds at most one shard's lock at a time.
	mu sync.Mutex

	// Owned by the holder of mu.
	parts     map[uint32]*part
	live      int
	batch     []*request
	dirty     []dirtyRef
	dirtySet  dirtySet
	changes   []replication.State
	tent      []tentative
	seen      []bool
	order     []uint32 // partitions of the current sweep pass
	cursor    int      // index in order of the partition being swept
	slotPos   int      // next slot of that partition's table to examine
	emptyLog  []int64
	expiredID []uint64 // scratch of sweepLogs
	steps     int      // sweep steps still due before the next tick
	tags      ruleTags
	passSlots int64 // slots and logs the tables had when the current pass began
	hot       hotKeys

	// Written by the holder of mu, read by Stats.
	keys        atomic.Int64
	batches     atomic.Uint64
	items       atomic.Uint64
	capHits     atomic.Uint64
	grants      atomic.Uint64
	grantTokens atomic.Uint64
	hotKeys     atomic.Int64
}

func newShard(cfg *Config) *shard {
	return &shard{
		snapMinIdle: int64(cfg.SnapshotMinIdle),
		in:          make(chan *request, cfg.QueueLen),
		kick:        make(chan struct{}, 1),
		sched:       cfg.Sched,
		now:         cfg.Now,
		onChange:    cfg.OnChange,
		maxBatch:    cfg.MaxBatch,
		sweepEvery:  cfg.SweepEvery,
		sweepBudget: cfg.SweepBudget,
		sweepPass:   cfg.SweepPass,
		importIdle:  int64(cfg.ImportIdle),
		maxKeys:     cfg.MaxKeys,
		nShards:     int64(cfg.Shards),
		parts:       make(map[uint32]*part),
		emptyLog:    make([]int64, 0),
		hot:         newHotKeys(cfg),
	}
}

// Rounds a caller's goroutine decides, at most, while it holds a shard's
// lock (its own request's batch and then whatever queued meanwhile),
// before it leaves the rest to the shard goroutine; and the rounds that
// goroutine decides per wake-up before it lets its ticker in.
const (
	callerRounds = 4
	shardRounds  = 16
)

// run is the shard goroutine: it runs the sweep ticker, and the batches
// that callers left queued (kick) when they had decided callerRounds
// batches for others. An idle shard wakes once per SweepEvery.
func (s *shard) run(quit <-chan struct{}) {
	tk := s.sched.NewTicker(s.sweepEvery)
	defer tk.Stop()
	tc := tk.C()
	for {
		select {
		case <-quit:
			return
		case <-s.kick:
			s.mu.Lock()
			s.serve(nil, shardRounds)
		case <-tc:
			s.mu.Lock()
			s.tick()
			s.serve(nil, 1)
			// Further sweep steps, each followed by at most one batch of
			// what queued meanwhile, so they make progress under load
			// and a pause stays one step long.
			for s.steps > 0 {
				select {
				case <-quit:
					return
				default:
				}
				s.mu.Lock()
				s.steps--
				s.sweepStep()
				s.serve(nil, 1)
			}
		}
	}
}

// decideNow decides r on the caller's goroutine (an Inline engine).
func (s *shard) decideNow(r *request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batch = append(s.batch[:0], r)
	s.process(s.batch)
	clear(s.batch)
}

// submit decides r: at once on the caller's goroutine when the shard's
// lock is free, else by queueing it for whoever holds the lock (who
// decides everything queued before releasing it). The caller then waits
// on r.done. It fails only if ctx ends or the engine closes while the
// queue is full.
func (s *shard) submit(ctx context.Context, r *request, quit <-chan struct{}) error {
	if s.mu.TryLock() {
		s.serve(r, callerRounds)
		return nil
	}
	select {
	case s.in <- r:
	default:
		select {
		case s.in <- r:
		case <-ctx.Done():
			return ctx.Err()
		case <-quit:
			return ErrClosed
		}
	}
	// The holder may have released the lock between our TryLock and the
	// queueing, after its last look at the queue.
	if s.mu.TryLock() {
		s.serve(nil, callerRounds)
	}
	return nil
}

// serve runs with s.mu held, which it releases: it decides first (if not
// nil) with whatever is queued, then further batches while requests are
// queued, up to rounds batches in all; what is still queued after that is
// left to the shard goroutine (kick). Once the lock is released it looks
// at the queue again: a request queued while the lock was held by us is
// taken by us (or by whoever took the lock first), so no request waits in
// the queue while the lock is free.
func (s *shard) serve(first *request, rounds int) {
	for done := 0; ; {
		for {
			s.batch = s.batch[:0]
			if first != nil {
				s.batch, first = append(s.batch, first), nil
			}
			s.drain()
			if len(s.batch) == 0 {
				break
			}
			s.process(s.batch)
			clear(s.batch)
			if done++; done >= rounds {
				break
			}
		}
		s.mu.Unlock()
		if len(s.in) == 0 {
			return
		}
		if done >= rounds {
			select {
			case s.kick <- struct{}{}:
			default: // already kicked
			}
			return
		}
		if !s.mu.TryLock() {
			return // its holder will look at the queue after releasing it
		}
	}
}

// drain adds queued requests to s.batch, up to maxBatch in all.
func (s *shard) drain() {
	for len(s.batch) < s.maxBatch {
		select {
		case r := <-s.in:
			s.batch = append(s.batch, r)
		default:
			return
		}
	}
}

// tick runs one sweep step and schedules as many more before the next tick
// as it takes to walk the tables within sweepPass: their slots (as many
// as when the current pass began, or now, whichever is more), sweepBudget
// per step, spread over sweepPass/sweepEvery ticks. (Counting the slots
// visits the partition map, about a thousand entries, once a tick.)
func (s *shard) tick() {
	slots := s.passSlots
	var now int64
	for _, p := range s.parts {
		now += int64(len(p.t.slots) + len(p.logs))
	}
	slots = max(slots, now)
	s.hot.sweep(s.now())
	s.hotKeys.Store(int64(s.hot.leasing))
	ticks := max(1, int64(s.sweepPass/s.sweepEvery))
	s.steps = int((slots/int64(s.sweepBudget) + ticks - 1) / ticks) // beyond this one
	s.sweepStep()
}

// sweepStep runs one incremental idle-expiry step and reports what it
// dropped.
func (s *shard) sweepStep() {
	s.sweep(s.now())
	s.flush() // the fresh states of counters that idled out
	s.keys.Store(int64(s.live))
}

// process decides one drained batch: one clock read, one OnChange call,
// then the replies.
func (s *shard) process(batch []*request) {
	now := s.now()
	var n uint64
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		switch r.op {
		case opCheck:
			s.check(r.items, r.out, now)
			n += uint64(len(r.items))
		case opExport:
			s.export(r)
		case opImport:
			s.importStates(r.states, now)
			r.states = nil
		case opDrop:
			s.drop(r.parts)
		case opSnapshot:
			r.states = s.snapshot(now)
		case opPermits:
			r.held = s.permitsHeld(now)
		}
	}
	s.flush()
	s.keys.Store(int64(s.live))
	s.batches.Add(1)
	s.items.Add(n)
	for _, r := range batch {
		r.done <- struct{}{}
	}
}

// flush hands the batch's changed states to OnChange.
func (s *shard) flush() {
	if len(s.dirty) == 0 && len(s.changes) == 0 {
		return
	}
	for _, d := range s.dirty {
		p := s.parts[d.pid]
		if p == nil {
			continue // dropped in this batch: no longer ours to report
		}
		st := replication.State{Partition: d.pid, ID: d.id}
		if d.log {
			le := p.logs[d.id]
			st.Idle, st.Volatile = le.idle, le.tag&volatileBit != 0
			switch {
			case le.log == nil: // gone: a fresh state of either kind
				st.Log = s.emptyLog
			case le.permits:
				st.Permits = le.log
			default:
				st.Log = le.log
			}
		} else {
			if i := p.t.find(d.id); i >= 0 {
				st = p.t.state(d.pid, i)
			}
		}
		s.changes = append(s.changes, st)
	}
	if len(s.changes) > 0 {
		s.onChange(s.changes)
	}
	clear(s.changes)
	s.changes = s.changes[:0]
	s.dirty = s.dirty[:0]
	s.dirtySet.reset()
}

func (s *shard) markDirty(pid uint32, k dirtyKey) {
	if s.onChange == nil {
		return
	}
	if !s.dirtySet.add(k) {
		return
	}
	s.dirty = append(s.dirty, dirtyRef{pid: pid, dirtyKey: k})
}

func (s *shard) partFor(pid uint32) *part {
	p := s.parts[pid]
	if p == nil {
		p = &part{}
		s.parts[pid] = p
	}
	return p
}

// idleAt is when a counter decided with l at now is certainly fresh again;
// at least 1, because 0 marks an empty table slot.
func idleAt(l bucket.Limit, now int64) int64 { return max(1, now+int64(l.IdleAfter())) }

// putCounter stores the new state of a counter (deleting it when fresh).
// i is the counter's index in its partition's table, or -1 if it is not
// stored; it must still be valid (no insert or removal since the lookup).
// tag is the rule tag to give a new counter, or an existing one that has
// none (0: none).
func (s *shard) putCounter(pid uint32, id uint64, i int, ns bucket.State, idle int64, tag uint16, vol bool) {
	k := dirtyKey{id: id}
	if i >= 0 {
		t := &s.parts[pid].t
		switch {
		case ns == (bucket.State{}):
			s.tags.dec(t.tags[i])
			t.remove(i)
			s.live--
			s.markDirty(pid, k)
		case ns != t.slots[i].s:
			t.slots[i].s = ns
			s.touch(t, i, idle, tag, vol)
			s.markDirty(pid, k)
		default:
			s.touch(t, i, idle, tag, vol)
		}
		return
	}
	if ns == (bucket.State{}) {
		return
	}
	s.partFor(pid).t.insert(id, ns, idle, withVolatile(tag, vol))
	s.tags.inc(tag)
	s.live++
	s.markDirty(pid, k)
}

// touch moves a stored counter's idle deadline later (never earlier),
// gives it tag if it has none and marks it volatile as its rule says now.
func (s *shard) touch(t *table, i int, idle int64, tag uint16, vol bool) {
	t.dl[i] = max(t.dl[i], deadlineSec(idle))
	if tag != 0 && ruleOf(t.tags[i]) == 0 {
		t.tags[i] |= tag
		s.tags.inc(tag)
	}
	t.tags[i] = withVolatile(t.tags[i], vol)
}

// putLog stores the new log of a sliding_log counter (deleting it when
// empty). old is the stored entry (if existed); tag as for putCounter.
func (s *shard) putLog(pid uint32, id uint64, existed bool, old logEntry, lg []int64, idle int64, changed bool, tag uint16, vol, permits bool) {
	k := dirtyKey{id: id, log: true}
	if len(lg) == 0 {
		if existed {
			p := s.parts[pid]
			delete(p.logs, id)
			if len(p.logs) == 0 {
				p.logs = nil // Go maps never shrink
			}
			s.tags.dec(old.tag)
			s.live--
			s.markDirty(pid, k)
		}
		return
	}
	p := s.partFor(pid)
	if p.logs == nil {
		p.logs = make(map[uint64]logEntry)
	}
	if existed {
		if ruleOf(old.tag) == 0 && tag != 0 {
			old.tag |= tag
			s.tags.inc(tag)
		}
		p.logs[id] = logEntry{log: lg, idle: max(old.idle, idle), tag: withVolatile(old.tag, vol), permits: old.permits}
		if changed {
			s.markDirty(pid, k)
		}
		return
	}
	p.logs[id] = logEntry{log: lg, idle: idle, tag: withVolatile(tag, vol), permits: permits}
	s.tags.inc(tag)
	s.live++
	s.markDirty(pid, k)
}

// capped reports whether the rule tagged tag is at its key cap on this
// shard: Item.Cap.MaxKeys (or Config.MaxKeys) split evenly over the shards.
func (s *shard) capped(tag uint16, it *Item) bool {
	if tag == 0 {
		return false
	}
	m := it.Cap.MaxKeys
	if m <= 0 {
		m = s.maxKeys
	}
	return s.tags.live[tag] >= (m+s.nShards-1)/s.nShards
}

// keyCap is the answer for a new key refused at its rule's key cap: not
// allowed, nothing taken, nothing stored.
func (s *shard) keyCap(l bucket.Limit) Result {
	s.capHits.Add(1)
	return Result{Result: bucket.Result{Limit: l.Capacity()}, KeyCap: true}
}

func (s *shard) check(items []Item, out []Result, now int64) {
	var seen []bool
	for i := range items {
		it := &items[i]
		if it.Group == 0 || it.Refund || it.Release != nil {
			out[i] = s.one(it, now)
			continue
		}
		if seen == nil {
			seen = s.seenBuf(len(items))
		}
		if !seen[i] {
			s.group(items, out, seen, i, now)
		}
	}
	for i := range items {
		switch it := &items[i]; {
		case !it.Auto:
		case it.Refund:
			s.hot.taken(it.ID, -it.Cost, now) // unspent lease tokens
		default:
			s.autoLease(it, &out[i], now)
		}
	}
}

func (s *shard) seenBuf(n int) []bool {
	if cap(s.seen) < n {
		s.seen = make([]bool, n)
	}
	s.seen = s.seen[:n]
	clear(s.seen)
	return s.seen
}

// one decides (or refunds) a single item against the stored counter.
func (s *shard) one(it *Item, now int64) Result {
	if it.Limit.Algorithm == bucket.Concurrency {
		return s.permit(it, now)
	}
	p := s.parts[it.Partition]
	if it.Limit.Algorithm == bucket.SlidingLog {
		var le logEntry
		var ok bool
		if p != nil {
			le, ok = p.logs[it.ID]
		}
		oldLen := len(le.log)
		var lg []int64
		var res bucket.Result
		if it.Refund {
			lg = bucket.RefundLog(le.log, it.Cost)
			lg, res = bucket.DecideLog(lg, it.Limit, 0, now)
			res.Allowed = true
		} else {
			lg, res = bucket.DecideLog(le.log, it.Limit, it.Cost, now)
		}
		var tag uint16
		if it.Cap != nil && ruleOf(le.tag) == 0 && len(lg) > 0 {
			tag = s.tags.get(it.Cap.Rule)
			if !ok && s.capped(tag, it) {
				return s.keyCap(it.Limit)
			}
		}
		changed := it.Refund || res.Allowed || len(lg) != oldLen
		s.putLog(it.Partition, it.ID, ok, le, lg, idleAt(it.Limit, now), changed, tag, it.Volatile, false)
		return Result{Result: res}
	}
	i := -1
	var old bucket.State
	if p != nil {
		if i = p.t.find(it.ID); i >= 0 {
			old = p.t.slots[i].s
		}
	}
	var ns bucket.State
	var res bucket.Result
	if it.Refund {
		ns = bucket.Refund(old, it.Limit, it.Cost, now)
		_, res = bucket.Decide(ns, it.Limit, 0, now)
		res.Allowed = true
	} else if it.Floor > 0 {
		var shed bool
		ns, res, shed = bucket.DecideAbove(old, it.Limit, it.Cost, it.Floor, now)
		if shed {
			return Result{Result: res, Shed: true}
		}
	} else {
		ns, res = bucket.Decide(old, it.Limit, it.Cost, now)
	}
	var tag uint16
	if it.Cap != nil && ns != (bucket.State{}) && (i < 0 || ruleOf(p.t.tags[i]) == 0) {
		tag = s.tags.get(it.Cap.Rule)
		if i < 0 && s.capped(tag, it) {
			return s.keyCap(it.Limit)
		}
	}
	s.putCounter(it.Partition, it.ID, i, ns, idleAt(it.Limit, now), tag, it.Volatile)
	return Result{Result: res}
}

// group decides every non-refund item of items[first]'s group on copies of
// their counters (same-ID items share one copy, so they see each other's
// consumption) and commits the copies only if every item was allowed.
func (s *shard) group(items []Item, out []Result, seen []bool, first int, now int64) {
	g := items[first].Group
	s.tent = s.tent[:0]
	all := true
	for j := first; j < len(items); j++ {
		it := &items[j]
		if it.Group != g || it.Refund || seen[j] {
			continue
		}
		seen[j] = true
		t := s.tentFor(it)
		var res bucket.Result
		var permit bucket.PermitID
		shed := false
		switch {
		case t.permits:
			t.lg, res, permit = s.takePermit(t.lg, it, now)
		case t.key.log:
			t.lg, res = bucket.DecideLog(t.lg, it.Limit, it.Cost, now)
		default:
			t.s, res, shed = bucket.DecideAbove(t.s, it.Limit, it.Cost, it.Floor, now)
		}
		t.idle = max(t.idle, idleAt(it.Limit, now))
		t.vol = it.Volatile
		out[j] = Result{Result: res, Permit: permit, Shed: shed}
		if it.Cap != nil && t.tag == 0 && ruleOf(t.old.tag) == 0 && (len(t.lg) > 0 || t.s != (bucket.State{})) {
			t.tag = s.tags.get(it.Cap.Rule)
			if !t.existed && s.capped(t.tag, it) {
				out[j] = s.keyCap(it.Limit)
			}
		}
		all = all && out[j].Allowed
	}
	if !all {
		// Nothing is taken: report every item as denied, the allowed ones
		// voided, with what they would have taken given back in Remaining.
		for j := first; j < len(items); j++ {
			it := &items[j]
			if it.Group != g || it.Refund || !out[j].Allowed {
				continue
			}
			out[j].Allowed, out[j].Voided = false, true
			if !out[j].Permit.Zero() {
				out[j].Permit = bucket.PermitID{}
				out[j].Remaining++ // one permit, whatever the cost
			} else {
				out[j].Remaining += it.Cost
			}
		}
		s.tent = s.tent[:0]
		return
	}
	for i := range s.tent {
		t := &s.tent[i]
		if t.key.log {
			var old logEntry
			if t.existed {
				old = s.parts[t.pid].logs[t.key.id]
			}
			s.putLog(t.pid, t.key.id, t.existed, old, t.lg, t.idle, true, t.tag, t.vol, t.permits)
		} else {
			// Look up again: earlier commits may have moved slots.
			i := -1
			if p := s.parts[t.pid]; p != nil {
				i = p.t.find(t.key.id)
			}
			s.putCounter(t.pid, t.key.id, i, t.s, t.idle, t.tag, t.vol)
		}
	}
	clear(s.tent)
	s.tent = s.tent[:0]
}

// tentFor returns the group copy of it's counter, loading it on first use.
func (s *shard) tentFor(it *Item) *tentative {
	perm := it.Limit.Algorithm == bucket.Concurrency
	k := dirtyKey{id: it.ID, log: perm || it.Limit.Algorithm == bucket.SlidingLog}
	for i := range s.tent {
		if s.tent[i].key == k && s.tent[i].pid == it.Partition {
			return &s.tent[i]
		}
	}
	t := tentative{pid: it.Partition, key: k, permits: perm}
	if p := s.parts[it.Partition]; p != nil {
		if k.log {
			if le, ok := p.logs[it.ID]; ok {
				t.existed, t.old.tag = true, le.tag
				t.lg = append([]int64(nil), le.log...) // DecideLog may reuse its input
			}
		} else if i := p.t.find(it.ID); i >= 0 {
			t.existed, t.s, t.old.tag = true, p.t.slots[i].s, p.t.tags[i]
		}
	}
	s.tent = append(s.tent, t)
	return &s.tent[len(s.tent)-1]
}

func (s *shard) export(r *request) {
	var out []replication.State
	for _, pid := range r.parts {
		p := s.parts[pid]
		if p == nil {
			continue
		}
		for i := range p.t.slots {
			if p.t.used(i) {
				out = append(out, p.t.state(pid, i))
			}
		}
		for _, id := range slices.Sorted(maps.Keys(p.logs)) {
			out = append(out, logState(pid, id, p.logs[id]))
		}
	}
	r.states = out
}

// importStates installs states whose counter is missing; existing local
// counters win. A state's idle deadline is kept (it is the counter's own,
// from its limit); one that came without (State.Idle 0) gets ImportIdle.
func (s *shard) importStates(states []replication.State, now int64) {
	def := max(1, now+s.importIdle)
	for i := range states {
		st := &states[i]
		idle := def
		if st.Idle > 0 {
			idle = st.Idle
		}
		p := s.parts[st.Partition]
		if st.Log != nil || st.Permits != nil {
			lg, permits := st.Log, st.Permits != nil
			if permits {
				lg = st.Permits
			}
			if len(lg) == 0 {
				continue
			}
			if p != nil {
				if _, ok := p.logs[st.ID]; ok {
					continue
				}
			}
			s.putLog(st.Partition, st.ID, false, logEntry{}, append([]int64(nil), lg...), idle, true, 0, st.Volatile, permits)
			continue
		}
		ns := bucket.State{A: st.A, B: st.B, C: st.C}
		if ns == (bucket.State{}) {
			continue
		}
		if p != nil && p.t.find(st.ID) >= 0 {
			continue
		}
		s.putCounter(st.Partition, st.ID, -1, ns, idle, 0, st.Volatile)
	}
}

func (s *shard) drop(parts []uint32) {
	for _, pid := range parts {
		if p := s.parts[pid]; p != nil {
			s.live -= p.live()
			for _, tag := range p.t.tags {
				s.tags.dec(tag)
			}
			for _, le := range p.logs {
				s.tags.dec(le.tag)
			}
			delete(s.parts, pid)
		}
	}
}

// sweep runs one incremental idle-expiry step: it walks partitions and
// their table slots from where the previous step stopped, examines about
// sweepBudget slots and drops counters whose idle deadline passed. A
// partition's sliding logs (a Go map, rare) are examined whole when the walk
// enters the partition. It starts at most one new pass per step.
func (s *shard) sweep(now int64) {
	budget := s.sweepBudget
	restarted := false
	for budget > 0 {
		if s.cursor >= len(s.order) {
			if restarted {
				return
			}
			restarted = true
			s.order = s.order[:0]
			s.tags.reap()
			s.passSlots = 0
			for pid, p := range s.parts {
				s.order = append(s.order, pid)
				s.passSlots += int64(len(p.t.slots) + len(p.logs))
			}
			slices.Sort(s.order) // a pass walks partitions in order, not as the map comes
			s.cursor, s.slotPos = 0, 0
			if len(s.order) == 0 {
				return
			}
		}
		pid := s.order[s.cursor]
		p := s.parts[pid]
		if p == nil {
			s.cursor, s.slotPos = s.cursor+1, 0
			continue
		}
		if s.slotPos == 0 {
			budget -= 1 + s.sweepLogs(pid, p, now)
		}
		budget -= s.sweepSlots(pid, p, now, max(budget, 1))
		if s.slotPos >= len(p.t.slots) {
			// Partition done: give memory back.
			if freed := p.t.shrink(); freed > 0 && s.rel != nil {
				s.rel.freed(freed)
			}
			if p.live() == 0 {
				delete(s.parts, pid)
			}
			s.cursor, s.slotPos = s.cursor+1, 0
		}
	}
}

// sweepSlots examines up to budget slots of p's table from slotPos. After a
// removal the same slot is examined again, since a later entry moved into
// it. (If the table was resized since the previous step, the walk goes on
// at the same index; entries it misses are found by the next pass.)
func (s *shard) sweepSlots(pid uint32, p *part, now int64, budget int) int {
	i, examined := s.slotPos, 0
	nowSec := uint32(min(max(now/1e9, 0), 1<<32-1)) // deadlines are rounded up: dropped no earlier than their ns deadline
	for i < len(p.t.slots) && examined < budget {
		examined++
		if p.t.dl[i] != 0 && p.t.dl[i] <= nowSec {
			s.expired(replication.State{Partition: pid, ID: p.t.slots[i].id})
			s.tags.dec(p.t.tags[i])
			p.t.remove(i)
			s.live--
			continue
		}
		i++
	}
	s.slotPos = i
	return examined
}

func (s *shard) sweepLogs(pid uint32, p *part, now int64) int {
	n := len(p.logs)
	s.expiredID = s.expiredID[:0]
	for id, le := range p.logs {
		if le.idle <= now {
			s.expiredID = append(s.expiredID, id)
		}
	}
	slices.Sort(s.expiredID) // reported in id order, not as the map comes
	for _, id := range s.expiredID {
		s.expired(replication.State{Partition: pid, ID: id, Log: s.emptyLog})
		s.tags.dec(p.logs[id].tag)
		delete(p.logs, id)
		s.live--
	}
	if len(p.logs) == 0 {
		p.logs = nil
	}
	return n
}

// expired queues the fresh state of a counter the sweep removed, so its
// replica copies go too.
func (s *shard) expired(st replication.State) {
	if s.onChange != nil {
		s.changes = append(s.changes, st)
	}
}

// logState is a sliding_log counter as shipped, its log copied.
func logState(pid uint32, id uint64, le logEntry) replication.State {
	st := replication.State{Partition: pid, ID: id, Idle: le.idle, Volatile: le.tag&volatileBit != 0}
	if le.permits {
		st.Permits = append([]int64{}, le.log...)
	} else {
		st.Log = append([]int64{}, le.log...)
	}
	return st
}
