package shard_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/internal/sched/schedtest"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
)

// parked starts an engine whose goroutines are queued on a simulated seam
// and never run until the test ends: whatever it decides, a caller's
// goroutine decided.
func parked(t *testing.T, cfg shard.Config) *shard.Engine {
	t.Helper()
	sim := schedtest.New(1, simStart)
	cfg.Sched = sim
	e, err := shard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { defer close(closed); e.Close() }()
		sim.RunAll() // the parked goroutines see the engine closed and return
		<-closed
	})
	return e
}

// An uncontended check is decided on its caller's goroutine: with the
// shard goroutines never running, checks (one shard or several, one after
// another) and the control calls still complete.
func TestUncontendedCheckDecidedByItsCaller(t *testing.T) {
	e := parked(t, shard.Config{Shards: 2})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	one := []shard.Item{{ID: 1, Partition: 4, Limit: perSecond(2), Cost: 1}}
	out := make([]shard.Result, 1)
	for i, want := range []bool{true, true, false} {
		if err := e.Check(ctx, one, out); err != nil {
			t.Fatalf("check %d: %v (nobody decided it)", i, err)
		}
		if out[0].Allowed != want {
			t.Fatalf("check %d: allowed %v, want %v", i, out[0].Allowed, want)
		}
	}
	two := []shard.Item{
		{ID: 2, Partition: 4, Limit: perSecond(5), Cost: 1},
		{ID: 3, Partition: 5, Limit: perSecond(5), Cost: 1}, // the other shard
	}
	out = make([]shard.Result, 2)
	if err := e.Check(ctx, two, out); err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("a check over two shards: %+v %v", out, err)
	}
	states, err := e.Export(ctx, []uint32{4, 5})
	if err != nil || len(states) != 3 {
		t.Fatalf("Export: %d states, %v; want 3", len(states), err)
	}
	if err := e.Drop(ctx, []uint32{4}); err != nil {
		t.Fatalf("Drop: %v", err)
	}
	if n := keys(t, e); n != 1 {
		t.Errorf("%d counters after dropping partition 4, want 1", n)
	}
}

// Checks that arrive while a shard is busy queue, and the goroutine that
// holds the shard decides them, batched, before it lets go (the shard
// goroutine never runs here): n checks queued behind one batch take one
// batch more, not n.
func TestBusyShardBatchesWhatQueued(t *testing.T) {
	const n = 20
	var once sync.Once
	hold, release := make(chan struct{}), make(chan struct{})
	e := parked(t, shard.Config{Shards: 1, OnChange: func([]replication.State) {
		once.Do(func() { close(hold); <-release }) // the first batch holds the shard
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	it := shard.Item{ID: 1, Partition: 0, Limit: perSecond(1000), Cost: 1}
	errs := make(chan error, n+1)
	go func() { errs <- e.Check(ctx, []shard.Item{it}, make([]shard.Result, 1)) }()
	select {
	case <-hold:
	case <-ctx.Done():
		t.Fatal("the first check was never decided")
	}
	for range n {
		go func() { errs <- e.Check(ctx, []shard.Item{it}, make([]shard.Result, 1)) }()
	}
	for { // every one of them queued behind the held shard
		st, err := e.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Queue[0] == n {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d checks queued", st.Queue[0], n)
		case <-time.After(time.Millisecond):
		}
	}
	close(release)
	for i := range n + 1 {
		if err := <-errs; err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
	}
	st, err := e.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Items != n+1 || st.Batches != 2 {
		t.Errorf("%d items in %d batches, want %d in 2", st.Items, st.Batches, n+1)
	}
}

// Many goroutines checking one shard at once: every check is answered
// (a request left queued while the lock is free would wait here for the
// hourly sweep tick, past the deadline) and every token is counted once.
func TestContendedShardAnswersEveryCheck(t *testing.T) {
	const callers, each = 16, 500
	e := start(t, shard.Config{Shards: 1, SweepEvery: time.Hour, SweepPass: time.Hour})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const burst = callers * each / 2
	perDay := bucket.Limit{Rate: burst, Period: 24 * time.Hour, Burst: burst} // no refill within the test
	it := shard.Item{ID: 1, Partition: 0, Limit: perDay, Cost: 1}
	var allowed atomic.Int64
	errs := make(chan error, callers)
	for range callers {
		go func() {
			out := make([]shard.Result, 1)
			for range each {
				if err := e.Check(ctx, []shard.Item{it}, out); err != nil {
					errs <- err
					return
				}
				if out[0].Allowed {
					allowed.Add(1)
				}
			}
			errs <- nil
		}()
	}
	for range callers {
		if err := <-errs; err != nil {
			t.Fatalf("a check was never answered: %v", err)
		}
	}
	if got := allowed.Load(); got != burst {
		t.Errorf("%d checks allowed, want exactly the burst %d", got, burst)
	}
}
