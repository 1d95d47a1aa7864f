package shard_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake Config.Now the test moves by hand.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() int64          { return c.ns.Load() }
func (c *clock) Add(d time.Duration) { c.ns.Add(int64(d)) }
func perSecond(n int64) bucket.Limit { return bucket.Limit{Rate: n, Period: time.Second, Burst: n} }
func perMinute(n int64) bucket.Limit { return bucket.Limit{Rate: n, Period: time.Minute, Burst: n} }
func slidingLog(n int64) bucket.Limit {
	return bucket.Limit{Algorithm: bucket.SlidingLog, Rate: n, Period: time.Second}
}
func ctxT(t *testing.T) context.Context { return t.Context() }

func start(t *testing.T, cfg shard.Config) *shard.Engine {
	t.Helper()
	e, err := shard.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.Start()
	t.Cleanup(e.Close)
	return e
}

func keys(t *testing.T, e *shard.Engine) int {
	t.Helper()
	st, err := e.Stats(context.Background())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st.Keys
}

func check1(t *testing.T, e *shard.Engine, it shard.Item) bucket.Result {
	t.Helper()
	out := make([]shard.Result, 1)
	if err := e.Check(ctxT(t), []shard.Item{it}, out); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if out[0].Voided {
		t.Fatalf("Check: a lone item came back voided: %+v", out[0])
	}
	return out[0].Result
}

func TestConfig(t *testing.T) {
	if err := shard.DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	for name, mod := range map[string]func(*shard.Config){
		"shards":    func(c *shard.Config) { c.Shards = -1 },
		"queue":     func(c *shard.Config) { c.QueueLen = -1 },
		"batch":     func(c *shard.Config) { c.MaxBatch = -2 },
		"sweep":     func(c *shard.Config) { c.SweepEvery = -time.Second },
		"budget":    func(c *shard.Config) { c.SweepBudget = -1 },
		"importTTL": func(c *shard.Config) { c.ImportIdle = -1 },
		"pass":      func(c *shard.Config) { c.SweepPass = -time.Second },
		"release":   func(c *shard.Config) { c.ReleaseBytes = -1 },
		"releaseTo": func(c *shard.Config) { c.ReleaseEvery = -1 },
		"maxKeys":   func(c *shard.Config) { c.MaxKeys = -1 },
		"autoRate":  func(c *shard.Config) { c.AutoLeaseRate = -1 },
		"autoGws":   func(c *shard.Config) { c.AutoLeaseGateways = 65 },
		"autoHoriz": func(c *shard.Config) { c.AutoLeaseHorizon = -time.Second },
		"autoKeys":  func(c *shard.Config) { c.AutoLeaseKeys = -1 },
	} {
		c := shard.DefaultConfig()
		mod(&c)
		if err := c.Validate(); !errors.Is(err, shard.ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig", name, err)
		}
		if _, err := shard.New(c); !errors.Is(err, shard.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
	c := shard.DefaultConfig()
	c.Now = nil // the seam's clock (TestInlineEngineRunsOnTheSeamsClock)
	if err := c.Validate(); err != nil {
		t.Errorf("nil Now: Validate = %v", err)
	}
}

// Single key: the engine's answers are exactly the pure bucket's answers
// for the same sequence of costs, refunds and times.
func TestDecisionsMatchBucket(t *testing.T) {
	clk := newClock()
	e := start(t, shard.Config{Shards: 2, Now: clk.Now})
	type step struct {
		dt     time.Duration
		cost   int64
		refund bool
	}
	steps := []step{
		{0, 1, false}, {0, 3, false}, {0, 7, false}, {0, 6, false}, {0, 1, false},
		{100 * time.Millisecond, 1, false}, {0, 2, true}, {0, 3, false},
		{time.Second, 4, false}, {0, 50, true}, {0, 10, false}, {0, 1, false},
		{333 * time.Millisecond, 5, false}, {10 * time.Second, 0, false},
	}
	for _, l := range []bucket.Limit{perSecond(10), slidingLog(10)} {
		var st bucket.State
		var lg []int64
		for i, s := range steps {
			clk.Add(s.dt)
			now := clk.Now()
			var want bucket.Result
			switch {
			case l.Algorithm == bucket.SlidingLog && s.refund:
				lg = bucket.RefundLog(lg, s.cost)
				lg, want = bucket.DecideLog(lg, l, 0, now)
				want.Allowed = true
			case l.Algorithm == bucket.SlidingLog:
				lg, want = bucket.DecideLog(lg, l, s.cost, now)
			case s.refund:
				st = bucket.Refund(st, l, s.cost, now)
				_, want = bucket.Decide(st, l, 0, now)
				want.Allowed = true
			default:
				st, want = bucket.Decide(st, l, s.cost, now)
			}
			got := check1(t, e, shard.Item{ID: 42, Partition: 3, Limit: l, Cost: s.cost, Refund: s.refund})
			if got != want {
				t.Fatalf("alg %v step %d %+v: got %+v, want %+v", l.Algorithm, i, s, got, want)
			}
		}
	}
}

// admitSeq is the reference: how many cost-1 requests the pure bucket
// admits at one instant, starting from st.
func admitSeq(st bucket.State, l bucket.Limit, now int64) (bucket.State, int) {
	n := 0
	for {
		ns, r := bucket.Decide(st, l, 1, now)
		if !r.Allowed {
			return st, n
		}
		st = ns
		n++
	}
}

// hammer runs workers×per Checks of items concurrently and returns how
// many were allowed; it fails the test if a call errs or a group is split.
func hammer(t *testing.T, e *shard.Engine, workers, per int, items []shard.Item) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]shard.Result, len(items))
			for range per {
				if err := e.Check(context.Background(), items, out); err != nil {
					errs <- err
					return
				}
				for k := range out {
					if out[k].Allowed != out[0].Allowed {
						errs <- errors.New("group split: items disagree")
						return
					}
				}
				if out[0].Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return int(admitted.Load())
}

// Many goroutines on one key admit exactly what the bucket allows, round
// after round as the fake clock refills it.
func TestConcurrentExact(t *testing.T) {
	clk := newClock()
	e := start(t, shard.Config{Shards: 4, QueueLen: 16, MaxBatch: 8, Now: clk.Now})
	l := bucket.Limit{Rate: 100, Period: time.Second, Burst: 250}
	item := []shard.Item{{ID: 7, Partition: 9, Limit: l, Cost: 1}}
	var ref bucket.State
	total, wantTotal := 0, 0
	for round, dt := range []time.Duration{0, 500 * time.Millisecond, 10 * time.Millisecond, 2 * time.Second, 0} {
		clk.Add(dt)
		var want int
		ref, want = admitSeq(ref, l, clk.Now())
		got := hammer(t, e, 16, 40, item)
		if got != want {
			t.Fatalf("round %d: admitted %d, want exactly %d", round, got, want)
		}
		total += got
		wantTotal += want
	}
	if total != wantTotal || total < 250+100*2 {
		t.Fatalf("total %d, want %d (>= burst + rate*T)", total, wantTotal)
	}
}

// Per-second and per-minute windows on one key, grouped: under concurrency
// every admitted request is admitted by both and the admitted count per
// instant equals the sequential all-or-nothing reference.
func TestGroupMultiWindow(t *testing.T) {
	clk := newClock()
	e := start(t, shard.Config{Shards: 2, MaxBatch: 4, Now: clk.Now})
	sec, min := perSecond(10), perMinute(25)
	items := []shard.Item{
		{ID: 1, Partition: 5, Limit: sec, Cost: 1, Group: 1},
		{ID: 2, Partition: 5, Limit: min, Cost: 1, Group: 1},
	}
	var rs, rm bucket.State
	for round := range 6 {
		if round > 0 {
			clk.Add(time.Second)
		}
		now := clk.Now()
		want := 0
		for {
			ns, a := bucket.Decide(rs, sec, 1, now)
			nm, b := bucket.Decide(rm, min, 1, now)
			if !a.Allowed || !b.Allowed {
				break
			}
			rs, rm = ns, nm
			want++
		}
		got := hammer(t, e, 8, 10, items)
		if got != want {
			t.Fatalf("round %d: admitted %d, want %d", round, got, want)
		}
	}
	// Both counters end exactly where the reference ends.
	states, err := e.Export(ctxT(t), []uint32{5})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		want := map[uint64]bucket.State{1: rs, 2: rm}[s.ID]
		if got := (bucket.State{A: s.A, B: s.B, C: s.C}); got != want {
			t.Errorf("counter %d: state %+v, want %+v", s.ID, got, want)
		}
	}
}

func TestGroupDeniedTakesNothing(t *testing.T) {
	clk := newClock()
	e := start(t, shard.Config{Shards: 1, Now: clk.Now})
	a := shard.Item{ID: 1, Partition: 0, Limit: perSecond(10), Cost: 1, Group: 7}
	b := shard.Item{ID: 2, Partition: 0, Limit: perSecond(3), Cost: 1, Group: 7}
	log := shard.Item{ID: 3, Partition: 0, Limit: slidingLog(10), Cost: 1, Group: 7}
	out := make([]shard.Result, 3)
	for i := range 3 {
		if err := e.Check(ctxT(t), []shard.Item{a, b, log}, out); err != nil {
			t.Fatal(err)
		}
		if !out[0].Allowed || !out[1].Allowed || !out[2].Allowed || out[0].Voided || out[1].Voided || out[2].Voided {
			t.Fatalf("call %d: %+v, want all allowed", i, out)
		}
	}
	before, _ := e.Export(ctxT(t), []uint32{0})
	if err := e.Check(ctxT(t), []shard.Item{a, b, log}, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Allowed || out[1].Allowed || out[2].Allowed {
		t.Fatalf("over-limit group: %+v, want all denied", out)
	}
	// b was over its own limit; a and log would have passed: voided.
	if !out[0].Voided || out[1].Voided || !out[2].Voided || out[1].RetryAfter <= 0 || out[0].RetryAfter != 0 {
		t.Errorf("over-limit group: %+v, want a and log voided (retry 0), b denied on its own", out)
	}
	if out[0].Remaining != 7 || out[2].Remaining != 7 {
		t.Errorf("rolled-back items report remaining %d and %d, want 7 (nothing taken)", out[0].Remaining, out[2].Remaining)
	}
	after, _ := e.Export(ctxT(t), []uint32{0})
	sortStates(before)
	sortStates(after)
	if !statesEqual(before, after) {
		t.Fatalf("denied group changed state:\nbefore %+v\nafter  %+v", before, after)
	}
	// A non-grouped item still goes through on its own.
	if r := check1(t, e, shard.Item{ID: 1, Partition: 0, Limit: perSecond(10), Cost: 1}); !r.Allowed || r.Remaining != 6 {
		t.Fatalf("ungrouped after denied group: %+v, want allowed with 6 left", r)
	}
}

// Two items of one group on the same counter see each other: cost 3 + 3
// on a bucket of 5 is denied as a whole even though each alone fits.
func TestGroupSameIDCountsTwice(t *testing.T) {
	clk := newClock()
	e := start(t, shard.Config{Shards: 1, Now: clk.Now})
	for _, l := range []bucket.Limit{perSecond(5), slidingLog(5)} {
		it := shard.Item{ID: 9, Partition: 1, Limit: l, Cost: 3, Group: 1}
		out := make([]shard.Result, 2)
		if err := e.Check(ctxT(t), []shard.Item{it, it}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed || out[1].Allowed {
			t.Fatalf("alg %v: 3+3 of 5 admitted: %+v", l.Algorithm, out)
		}
		it.Cost = 2
		if err := e.Check(ctxT(t), []shard.Item{it, it}, out); err != nil {
			t.Fatal(err)
		}
		if !out[0].Allowed || !out[1].Allowed || out[1].Remaining != 1 {
			t.Fatalf("alg %v: 2+2 of 5: %+v, want both allowed, 1 left", l.Algorithm, out)
		}
	}
}

func TestRefund(t *testing.T) {
	clk := newClock()
	e := start(t, shard.Config{Shards: 3, Now: clk.Now})
	for _, l := range []bucket.Limit{perSecond(10), slidingLog(10)} {
		it := shard.Item{ID: 11, Partition: 4, Limit: l, Cost: 6}
		if r := check1(t, e, it); !r.Allowed || r.Remaining != 4 {
			t.Fatalf("alg %v take 6: %+v", l.Algorithm, r)
		}
		it.Refund, it.Cost = true, 2
		if r := check1(t, e, it); !r.Allowed || r.Remaining != 6 {
			t.Fatalf("alg %v refund 2: %+v, want 6 left", l.Algorithm, r)
		}
		it.Cost = 1000
		if r := check1(t, e, it); r.Remaining != 10 {
			t.Fatalf("alg %v refund 1000: remaining %d, want capped at 10", l.Algorithm, r.Remaining)
		}
		it.Refund, it.Cost = false, 11
		if r := check1(t, e, it); r.Allowed {
			t.Fatalf("alg %v: refund created tokens above capacity: %+v", l.Algorithm, r)
		}
	}
}

// Items of one call on different shards land in the right out slots.
func TestCheckAcrossShards(t *testing.T) {
	clk := newClock()
	e := start(t, shard.Config{Shards: 3, Now: clk.Now})
	var items []shard.Item
	for i := range 30 {
		items = append(items, shard.Item{ID: uint64(i), Partition: uint32(i), Limit: perSecond(100), Cost: int64(i)})
	}
	out := make([]shard.Result, len(items))
	if err := e.Check(ctxT(t), items, out); err != nil {
		t.Fatal(err)
	}
	for i, r := range out {
		if !r.Allowed || r.Remaining != int64(100-i) {
			t.Fatalf("item %d: %+v, want remaining %d", i, r, 100-i)
		}
	}
	if err := e.Check(ctxT(t), items, out[:1]); !errors.Is(err, shard.ErrInvalidItem) {
		t.Fatalf("len mismatch: %v", err)
	}
	items[4].Cost = -1
	if err := e.Check(ctxT(t), items, out); !errors.Is(err, shard.ErrInvalidItem) {
		t.Fatalf("negative cost: %v", err)
	}
	if n := keys(t, e); n != 29 { // cost 0 on a fresh counter stores nothing
		t.Fatalf("Keys = %d, want 29", n)
	}
}

func sortStates(s []replication.State) {
	slices.SortFunc(s, func(a, b replication.State) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
}

func statesEqual(a, b []replication.State) bool {
	return slices.EqualFunc(a, b, func(x, y replication.State) bool {
		return x.Partition == y.Partition && x.ID == y.ID && x.A == y.A && x.B == y.B && x.C == y.C &&
			slices.Equal(x.Log, y.Log) && (x.Log == nil) == (y.Log == nil)
	})
}

func TestExportImportDrop(t *testing.T) {
	clk := newClock()
	var mu sync.Mutex
	var reported []replication.State
	onChange := func(s []replication.State) {
		mu.Lock()
		defer mu.Unlock()
		for _, st := range s {
			st.Log = slices.Clone(st.Log)
			reported = append(reported, st)
		}
	}
	a := start(t, shard.Config{Shards: 2, Now: clk.Now})
	b := start(t, shard.Config{Shards: 3, Now: clk.Now, OnChange: onChange})
	var items []shard.Item
	for p := range uint32(6) {
		items = append(items,
			shard.Item{ID: uint64(100 + p), Partition: p, Limit: perSecond(10), Cost: 4},
			shard.Item{ID: uint64(200 + p), Partition: p, Limit: slidingLog(10), Cost: 3})
	}
	out := make([]shard.Result, len(items))
	if err := a.Check(ctxT(t), items, out); err != nil {
		t.Fatal(err)
	}
	moved := []uint32{1, 2, 4}
	exp, err := a.Export(ctxT(t), moved)
	if err != nil {
		t.Fatal(err)
	}
	if len(exp) != 6 {
		t.Fatalf("exported %d states, want 6", len(exp))
	}
	// b already has a counter for 101 with more consumption: it is kept.
	if r := check1(t, b, shard.Item{ID: 101, Partition: 1, Limit: perSecond(10), Cost: 9}); !r.Allowed {
		t.Fatal(r)
	}
	mu.Lock()
	reported = nil
	mu.Unlock()
	if err := b.Import(ctxT(t), exp); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(reported) != 5 {
		t.Errorf("OnChange reported %d imported states, want 5 (existing 101 kept)", len(reported))
	}
	mu.Unlock()
	if err := a.Drop(ctxT(t), moved); err != nil {
		t.Fatal(err)
	}
	if left, _ := a.Export(ctxT(t), moved); len(left) != 0 {
		t.Fatalf("after Drop, Export = %+v", left)
	}
	if n := keys(t, a); n != 6 {
		t.Fatalf("a Keys = %d after dropping 3 of 6 partitions, want 6", n)
	}
	// b continues from the handed-off state.
	for _, p := range moved {
		want := int64(6 - 1)
		if p == 1 {
			want = 1 - 1 // local counter kept: 9 taken, not 4
		}
		if r := check1(t, b, shard.Item{ID: uint64(100 + p), Partition: p, Limit: perSecond(10), Cost: 1}); r.Remaining != want {
			t.Errorf("partition %d token bucket: remaining %d, want %d", p, r.Remaining, want)
		}
		if r := check1(t, b, shard.Item{ID: uint64(200 + p), Partition: p, Limit: slidingLog(10), Cost: 1}); r.Remaining != 10-3-1 {
			t.Errorf("partition %d sliding log: remaining %d, want %d", p, r.Remaining, 10-3-1)
		}
	}
	// Export of b equals the last states OnChange reported for those ids.
	got, err := b.Export(ctxT(t), moved)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	last := map[uint64]replication.State{}
	for _, s := range reported {
		last[s.ID] = s
	}
	mu.Unlock()
	var want []replication.State
	for _, s := range last {
		want = append(want, s)
	}
	sortStates(got)
	sortStates(want)
	if !statesEqual(got, want) {
		t.Fatalf("Export and OnChange disagree:\nexport   %+v\nreported %+v", got, want)
	}
}

// Counters idle out of the engine, and the fresh states the sweep reports
// make a replica (a replication.Store fed by OnChange, as a node's
// replicator feeds its peers) forget its copies too.
func TestIdleExpiry(t *testing.T) {
	clk := newClock()
	replica := replication.NewStore()
	e := start(t, shard.Config{Shards: 2, Now: clk.Now, SweepEvery: time.Millisecond, SweepBudget: 100,
		OnChange: func(s []replication.State) { replica.Apply("owner", s) }})
	l := perSecond(10) // full again one second after the last take
	var items []shard.Item
	for i := range 2000 {
		items = append(items, shard.Item{ID: uint64(i), Partition: uint32(i % 50), Limit: l, Cost: 1})
	}
	out := make([]shard.Result, len(items))
	if err := e.Check(ctxT(t), items, out); err != nil {
		t.Fatal(err)
	}
	items = append(items[:0], shard.Item{ID: 1 << 40, Partition: 3, Limit: slidingLog(5), Cost: 1})
	if err := e.Check(ctxT(t), items, out[:1]); err != nil {
		t.Fatal(err)
	}
	if n := keys(t, e); n != 2001 {
		t.Fatalf("Keys = %d, want 2001", n)
	}
	if n := replica.Len(); n != 2001 {
		t.Fatalf("replica holds %d copies, want 2001", n)
	}
	clk.Add(900 * time.Millisecond)
	survivor := shard.Item{ID: 5, Partition: 5, Limit: l, Cost: 1}
	check1(t, e, survivor) // moves its deadline to now + 1s
	clk.Add(200 * time.Millisecond)
	testwait.Until(t, "all but one key to expire", func() bool { return keys(t, e) == 1 })
	left, err := e.Export(ctxT(t), []uint32{5})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].ID != 5 {
		t.Fatalf("survivor: %+v, want counter 5", left)
	}
	testwait.Until(t, "the replica to forget the expired copies", func() bool { return replica.Len() == 1 })
	if got := replica.Peek([]uint32{5}); len(got) != 1 || !reflect.DeepEqual(got[0], left[0]) {
		t.Fatalf("replica's copy of the survivor: %+v, want %+v", got, left)
	}
	clk.Add(time.Second)
	testwait.Until(t, "the last key to expire", func() bool { return keys(t, e) == 0 })
	testwait.Until(t, "the replica to forget every copy", func() bool { return replica.Len() == 0 && replica.Partitions() == 0 })
}

// blockingOnChange stalls the shard goroutine inside OnChange (tests only:
// real OnChange callbacks must not block).
type blocker struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}), release: make(chan struct{})}
}

func (b *blocker) onChange([]replication.State) {
	b.once.Do(func() {
		close(b.entered)
		<-b.release
	})
}

func TestCancel(t *testing.T) {
	clk := newClock()
	blk := newBlocker()
	e := start(t, shard.Config{Shards: 1, QueueLen: 1, Now: clk.Now, OnChange: blk.onChange})
	it := shard.Item{ID: 1, Partition: 0, Limit: perSecond(10), Cost: 1}
	first := make(chan error, 1)
	go func() { first <- e.Check(context.Background(), []shard.Item{it}, make([]shard.Result, 1)) }()
	<-blk.entered // the shard is stuck in the first batch

	// Queued, then cancelled while waiting for the reply.
	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan error, 1)
	go func() { queued <- e.Check(ctx, []shard.Item{it}, make([]shard.Result, 1)) }()
	testwait.Until(t, "the request to be queued", func() bool {
		st, _ := e.Stats(context.Background())
		return st.Queue[0] == 1
	})
	// The queue is full: this one is cancelled while sending.
	ctx2, cancel2 := context.WithCancel(context.Background())
	sending := make(chan error, 1)
	go func() { sending <- e.Check(ctx2, []shard.Item{it}, make([]shard.Result, 1)) }()
	cancel2()
	if err := <-sending; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while sending: %v", err)
	}
	cancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while queued: %v", err)
	}
	if err := e.Check(ctx, []shard.Item{it}, make([]shard.Result, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("already cancelled: %v", err)
	}
	close(blk.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// Only the first request took a token: the cancelled ones were skipped.
	if r := check1(t, e, it); !r.Allowed || r.Remaining != 8 {
		t.Fatalf("after cancellations: %+v, want 8 left", r)
	}
}

func TestCloseJoins(t *testing.T) {
	defer goleak.VerifyNone(t)
	clk := newClock()
	blk := newBlocker()
	e, err := shard.New(shard.Config{Shards: 2, Now: clk.Now, OnChange: blk.onChange})
	if err != nil {
		t.Fatal(err)
	}
	it := shard.Item{ID: 1, Partition: 0, Limit: perSecond(10), Cost: 1}
	out := make([]shard.Result, 1)
	if err := e.Check(ctxT(t), []shard.Item{it}, out); !errors.Is(err, shard.ErrNotStarted) {
		t.Fatalf("before Start: %v", err)
	}
	e.Start()
	first := make(chan error, 1)
	go func() { first <- e.Check(context.Background(), []shard.Item{it}, make([]shard.Result, 1)) }()
	<-blk.entered
	queued := make(chan error, 1)
	go func() { queued <- e.Check(context.Background(), []shard.Item{it}, make([]shard.Result, 1)) }()
	testwait.Until(t, "the request to be queued", func() bool {
		st, _ := e.Stats(context.Background())
		return st.Queue[0] == 1
	})
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	close(blk.release)
	<-closed
	if err := <-first; err != nil {
		t.Fatalf("in-flight request: %v", err)
	}
	if err := <-queued; err != nil && !errors.Is(err, shard.ErrClosed) {
		t.Fatalf("queued request: %v, want nil or ErrClosed", err)
	}
	if err := e.Check(ctxT(t), []shard.Item{it}, out); !errors.Is(err, shard.ErrClosed) {
		t.Fatalf("Check after Close: %v", err)
	}
	if _, err := e.Export(ctxT(t), []uint32{0}); !errors.Is(err, shard.ErrClosed) {
		t.Fatalf("Export after Close: %v", err)
	}
	if _, err := e.Stats(ctxT(t)); !errors.Is(err, shard.ErrClosed) {
		t.Fatalf("Stats after Close: %v", err)
	}
	e.Close() // idempotent
}
