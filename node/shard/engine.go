package shard

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/replication"
)

// Item is one counter to decide (or refund) in a Check call.
type Item struct {
	ID        uint64       // counter id: CounterID(rule, key)
	Partition uint32       // ring partition of the key (all rules for one key share it)
	Limit     bucket.Limit // effective limit (rule or override), resolved by the caller
	Cost      int64
	Refund    bool // give Cost back instead of taking it
	// Auto marks a counter of a rule with lease: auto: the shard keeps a
	// rate estimate for it and may grant Gateway an automatic lease
	// (Result.Granted). See autolease.go.
	Auto bool
	// Volatile marks a counter of a rule with durable: off: it is never
	// snapshotted for the data dir (Engine.Snapshot), and its replicas
	// learn so (replication.State.Volatile).
	Volatile bool
	Group    uint32 // items given in one Check call with the same non-zero Group are all-or-nothing
	// Cap names the counter's rule for the per-rule key cap; nil leaves
	// the counter uncounted and uncapped. (A pointer, shared by every item
	// of the rule, keeps Item small: items are copied per check; it is
	// 104 bytes.)
	Cap *KeyCap
	// Gateway names the gateway asking (a non-zero hash) when it can hold
	// an automatic lease of the counter now; 0: no lease may be granted.
	Gateway uint64
	// Release, for a concurrency counter, gives back this permit instead of
	// deciding (Cost and Group are ignored): Result.Allowed says whether it
	// was held. See permit.go.
	Release *bucket.PermitID
	// Floor is the tokens the item must leave in its bucket (a rule's
	// reserve for other classes); an item refused for the floor alone is
	// answered Result.Shed. 0: none.
	Floor int64
}

// KeyCap is a rule's key cap: the most live counters of Rule this engine
// holds. A new counter of a rule at its cap is not stored: its item is
// answered Result.KeyCap. Each shard holds up to ceil(MaxKeys/Shards) of
// them. The engine only reads it.
type KeyCap struct {
	Rule    string
	MaxKeys int64 // 0: Config.MaxKeys
}

// Result is the answer for one Item: the bucket's, and whether the item
// was voided: it would have passed, but another item of its Group on the
// same shard was denied, so it took nothing (Allowed is false, and
// Remaining counts its tokens as not taken).
type Result struct {
	bucket.Result
	Voided bool
	// KeyCap is set when the item was for a new counter of a rule at its
	// key cap (Item.Cap): Allowed is false, nothing was taken or
	// stored. Existing counters of the rule are decided as usual.
	KeyCap bool
	// Granted is an automatic lease: tokens taken beyond Cost for the
	// item's Gateway (Remaining already counts them as taken).
	Granted int64
	// Permit is the permit an allowed concurrency item took (drawn from
	// Config.Sched); zero for other items. It expires Limit.Period after
	// the decision unless released first.
	Permit bucket.PermitID
	// Shed: refused for the item's Floor alone (bucket.DecideAbove).
	Shed bool
}

// Stats is a point-in-time view of the engine. Counters are read without
// stopping the shards, so the fields are not one consistent snapshot.
type Stats struct {
	Keys    int    // live counters (all shards), as of each shard's last batch or sweep
	Queue   []int  // requests waiting in each shard's channel, by shard index
	Batches uint64 // batches decided since New
	Items   uint64 // items decided or refunded since New
	// KeyCapHits counts items refused at their rule's key cap (Result.KeyCap).
	KeyCapHits uint64
	// Releases counts returns of freed memory to the OS
	// (Config.ReleaseBytes).
	Releases uint64
	// AutoLeases counts automatic lease grants and AutoLeaseTokens the
	// tokens they took; HotKeys is the keys currently leased automatically.
	AutoLeases, AutoLeaseTokens uint64
	HotKeys                     int
}

// Engine is the in-memory decision engine: Shards goroutines, each the sole
// owner of its partitions' counters. See the package documentation.
type Engine struct {
	cfg    Config
	shards []*shard
	rel    *releaser
	pool   sync.Pool // *request, only ones whose reply was received

	mu      sync.Mutex // guards the lifecycle transitions below
	started atomic.Bool
	closed  atomic.Bool
	quit    chan struct{} // closed by Close: shards stop
	stopped chan struct{} // closed by Close once every shard goroutine returned
	wg      sync.WaitGroup
}

// New builds an engine; zero Config fields take their defaults. Call Start
// before using it and Close when done.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:     cfg,
		shards:  make([]*shard, cfg.Shards),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
		rel:     newReleaser(&cfg),
	}
	for i := range e.shards {
		e.shards[i] = newShard(&e.cfg)
		e.shards[i].rel = e.rel
	}
	e.pool.New = func() any { return &request{done: make(chan struct{}, 1)} }
	return e, nil
}

// Start starts the shard goroutines (through Config.Sched; none when
// Config.Inline). Calling it again, or after Close, does nothing.
func (e *Engine) Start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started.Load() || e.closed.Load() {
		return
	}
	if !e.cfg.Inline {
		for _, s := range e.shards {
			e.goFunc(func() { s.run(e.quit) })
		}
		e.goFunc(func() { e.rel.run(e.quit) })
	}
	e.started.Store(true)
}

// goFunc starts f through the seam as work Close joins.
func (e *Engine) goFunc(f func()) {
	e.wg.Add(1)
	e.cfg.Sched.Go(func() {
		defer e.wg.Done()
		f()
	})
}

// Tick runs, in an Inline engine, what the sweep ticker runs in a shard
// goroutine: on every shard one sweep step and the further steps it
// schedules (as an idle shard runs them back to back), on the caller's
// goroutine. An engine with goroutines sweeps on its own; there Tick does
// nothing.
func (e *Engine) Tick() error {
	if err := e.usable(); err != nil {
		return err
	}
	if !e.cfg.Inline {
		return nil
	}
	for _, s := range e.shards {
		s.mu.Lock()
		s.tick()
		for ; s.steps > 0; s.steps-- {
			s.sweepStep()
		}
		s.mu.Unlock()
	}
	return nil
}

// Close stops the shards and waits for their goroutines to return. A shard
// finishes the batch it is deciding; requests still queued are answered
// with ErrClosed. Every later call returns ErrClosed. Close is idempotent.
func (e *Engine) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return
	}
	e.closed.Store(true)
	close(e.quit)
	e.wg.Wait()
	close(e.stopped)
}

func (e *Engine) usable() error {
	if e.closed.Load() {
		return ErrClosed
	}
	if !e.started.Load() {
		return ErrNotStarted
	}
	return nil
}

func (e *Engine) shardOf(partition uint32) int {
	return int(partition % uint32(len(e.shards)))
}

func (e *Engine) getReq(ctx context.Context, op opKind) *request {
	r := e.pool.Get().(*request)
	r.op, r.ctx = op, ctx
	return r
}

// putReq recycles a request whose reply was received (the shard no longer
// holds it). Abandoned requests (ctx cancelled, engine closed) are left to
// the garbage collector because the shard may still write to them.
func (e *Engine) putReq(r *request) {
	clear(r.items)
	r.items, r.pos, r.out = r.items[:0], r.pos[:0], r.out[:0]
	r.ctx, r.err, r.parts, r.states = nil, nil, nil, nil
	e.pool.Put(r)
}

func (e *Engine) send(ctx context.Context, s *shard, r *request) error {
	if e.cfg.Inline {
		s.decideNow(r)
		return nil
	}
	return s.submit(ctx, r, e.quit)
}

func (e *Engine) wait(ctx context.Context, r *request) error {
	select { // decided inline, the usual case: ctx.Done would make a channel per request
	case <-r.done:
		return r.err
	default:
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stopped:
		select {
		case <-r.done:
			return r.err
		default:
			return ErrClosed
		}
	}
}

// Check decides every item and writes its result to out[i]; len(out) must
// equal len(items). It blocks until all items are decided. Items are split
// by shard (Partition % Shards), one request per shard; each shard decides
// its part in order, except that the items of one Group are decided
// together at the position of the group's first item.
//
// Refund items give Cost back (never above capacity), ignore Group and
// report Allowed with the remaining capacity after the refund.
//
// If ctx ends first, Check returns ctx.Err(); the parts of the call that a
// shard had already decided stay decided (a shard skips a request whose
// ctx has already ended when it reaches it).
func (e *Engine) Check(ctx context.Context, items []Item, out []Result) error {
	if len(out) != len(items) {
		return fmt.Errorf("%w: %d items, %d results", ErrInvalidItem, len(items), len(out))
	}
	for i := range items {
		if items[i].Cost < 0 {
			return fmt.Errorf("%w: item %d: negative cost %d", ErrInvalidItem, i, items[i].Cost)
		}
	}
	if err := e.usable(); err != nil {
		return err
	}
	if len(items) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	first := e.shardOf(items[0].Partition)
	single := true
	for i := 1; i < len(items); i++ {
		if e.shardOf(items[i].Partition) != first {
			single = false
			break
		}
	}
	if single {
		// The common case: every rule of one key lives in one partition.
		r := e.getReq(ctx, opCheck)
		r.items = append(r.items, items...)
		r.out = grow(r.out, len(items))
		if err := e.send(ctx, e.shards[first], r); err != nil {
			e.putReq(r)
			return err
		}
		if err := e.wait(ctx, r); err != nil {
			return err
		}
		copy(out, r.out)
		e.putReq(r)
		return nil
	}
	reqs := make([]*request, len(e.shards))
	for i := range items {
		s := e.shardOf(items[i].Partition)
		if reqs[s] == nil {
			reqs[s] = e.getReq(ctx, opCheck)
		}
		reqs[s].items = append(reqs[s].items, items[i])
		reqs[s].pos = append(reqs[s].pos, i)
	}
	for s, r := range reqs {
		if r == nil {
			continue
		}
		r.out = grow(r.out, len(r.items))
		if err := e.send(ctx, e.shards[s], r); err != nil {
			return err
		}
	}
	for _, r := range reqs {
		if r == nil {
			continue
		}
		if err := e.wait(ctx, r); err != nil {
			return err
		}
		for k, p := range r.pos {
			out[p] = r.out[k]
		}
		e.putReq(r)
	}
	return nil
}

// byShard runs one control request per shard that has work, in parallel,
// and waits for all of them.
func (e *Engine) byShard(ctx context.Context, reqs []*request) error {
	if err := e.usable(); err != nil {
		return err
	}
	for s, r := range reqs {
		if r == nil {
			continue
		}
		r.ctx, r.done = ctx, make(chan struct{}, 1)
		if err := e.send(ctx, e.shards[s], r); err != nil {
			return err
		}
	}
	for _, r := range reqs {
		if r == nil {
			continue
		}
		if err := e.wait(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) partitionReqs(op opKind, partitions []uint32) []*request {
	reqs := make([]*request, len(e.shards))
	for _, p := range partitions {
		s := e.shardOf(p)
		if reqs[s] == nil {
			reqs[s] = &request{op: op}
		}
		reqs[s].parts = append(reqs[s].parts, p)
	}
	return reqs
}

// Export returns a copy of the live counter states of the given partitions
// (Log slices are copies too). Each shard's part is a consistent snapshot
// taken between two of its batches.
func (e *Engine) Export(ctx context.Context, partitions []uint32) ([]replication.State, error) {
	reqs := e.partitionReqs(opExport, partitions)
	if err := e.byShard(ctx, reqs); err != nil {
		return nil, err
	}
	var out []replication.State
	for _, r := range reqs {
		if r != nil {
			out = append(out, r.states...)
		}
	}
	return out, nil
}

// Import installs states (replica promotion, hand-off). A state whose
// counter is missing locally is installed; a counter that already exists
// locally is kept as it is and the imported state is ignored. A state with
// a non-nil Log is a sliding_log counter; a zero state (or an empty Log) is
// a fresh counter and is not stored. Installed states are reported to
// OnChange like decisions. An imported counter keeps the idle deadline its
// state carries (State.Idle); one without gets now + ImportIdle, replaced
// by the real one at its next decision.
func (e *Engine) Import(ctx context.Context, states []replication.State) error {
	reqs := make([]*request, len(e.shards))
	for i := range states {
		s := e.shardOf(states[i].Partition)
		if reqs[s] == nil {
			reqs[s] = &request{op: opImport}
		}
		reqs[s].states = append(reqs[s].states, states[i])
	}
	return e.byShard(ctx, reqs)
}

// Drop forgets every counter of the given partitions (after handing them
// off). It does not call OnChange.
func (e *Engine) Drop(ctx context.Context, partitions []uint32) error {
	return e.byShard(ctx, e.partitionReqs(opDrop, partitions))
}

// Stats reads the shards' counters without queueing behind their work.
func (e *Engine) Stats(ctx context.Context) (Stats, error) {
	if err := e.usable(); err != nil {
		return Stats{}, err
	}
	if err := ctx.Err(); err != nil {
		return Stats{}, err
	}
	st := Stats{Queue: make([]int, len(e.shards)), Releases: e.rel.done.Load()}
	for i, s := range e.shards {
		st.Keys += int(s.keys.Load())
		st.Queue[i] = len(s.in)
		st.Batches += s.batches.Load()
		st.Items += s.items.Load()
		st.KeyCapHits += s.capHits.Load()
		st.AutoLeases += s.grants.Load()
		st.AutoLeaseTokens += s.grantTokens.Load()
		st.HotKeys += int(s.hotKeys.Load())
	}
	return st, nil
}

func grow(b []Result, n int) []Result {
	if cap(b) < n {
		return make([]Result, n)
	}
	b = b[:n]
	clear(b)
	return b
}

// CounterID names one (rule, key) counter: xxhash64 of the rule id, a zero
// byte and the key. Every node computes the same id, so hand-off and
// replication move counters by it.
func CounterID(rule, key string) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(rule)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(key)
	return d.Sum64()
}
