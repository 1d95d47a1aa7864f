package shard_test

import (
	"maps"
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/internal/sched/schedtest"
	"github.com/weirlimit/weir/node/shard"
)

// PermitsHeld counts the live permits by rule, across shards: taking one
// adds one, a release or its expiry takes it out, and other counters
// (a token bucket) do not count.
func TestPermitsHeldByRule(t *testing.T) {
	sim := schedtest.New(1, simStart)
	e := start(t, shard.Config{Shards: 2, Sched: sim, Inline: true})
	conc := bucket.Limit{Algorithm: bucket.Concurrency, Rate: 5, Period: 10 * time.Second}
	capC, capD := &shard.KeyCap{Rule: "c"}, &shard.KeyCap{Rule: "d"}
	held := func(want map[string]int64) {
		t.Helper()
		got, err := e.PermitsHeld(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("permits held %v, want %v", got, want)
		}
	}
	held(map[string]int64{})
	var first shard.Result
	for i, it := range []shard.Item{
		{ID: 1, Partition: 0, Limit: conc, Cost: 1, Cap: capC},
		{ID: 1, Partition: 0, Limit: conc, Cost: 1, Cap: capC},
		{ID: 2, Partition: 1, Limit: conc, Cost: 1, Cap: capC},
		{ID: 3, Partition: 1, Limit: conc, Cost: 1, Cap: capD},
		{ID: 4, Partition: 0, Limit: perSecond(5), Cost: 1, Cap: &shard.KeyCap{Rule: "tb"}},
	} {
		out := make([]shard.Result, 1)
		if err := e.Check(ctxT(t), []shard.Item{it}, out); err != nil || !out[0].Allowed {
			t.Fatalf("item %d: %+v %v", i, out[0], err)
		}
		if i == 0 {
			first = out[0]
		}
	}
	held(map[string]int64{"c": 3, "d": 1})

	out := make([]shard.Result, 1)
	rel := shard.Item{ID: 1, Partition: 0, Limit: conc, Cap: capC, Release: &first.Permit}
	if err := e.Check(ctxT(t), []shard.Item{rel}, out); err != nil || !out[0].Allowed {
		t.Fatalf("release: %+v %v", out[0], err)
	}
	held(map[string]int64{"c": 2, "d": 1})

	sim.Advance(10 * time.Second) // every permit's TTL
	held(map[string]int64{})
}
