package shard_test

import (
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
)

// A rule at its key cap refuses new keys (KeyCap, nothing stored), keeps
// deciding its existing keys, leaves other rules alone, and takes new keys
// again once old ones idle out.
func TestKeyCap(t *testing.T) {
	clk := newClock()
	e := start(t, shard.Config{Shards: 1, Now: clk.Now, SweepEvery: time.Millisecond, MaxKeys: 5})
	l := perSecond(10)
	item := func(rule string, maxKeys int64, key uint64, cost int64) shard.Item {
		id := mix(key) ^ uint64(len(rule))
		return shard.Item{ID: id, Partition: uint32(key % 8), Limit: l, Cost: cost, Cap: &shard.KeyCap{Rule: rule, MaxKeys: maxKeys}}
	}
	check := func(its ...shard.Item) []shard.Result {
		t.Helper()
		out := make([]shard.Result, len(its))
		if err := e.Check(ctxT(t), its, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for k := range uint64(3) {
		if r := check(item("r", 3, k, 1))[0]; !r.Allowed || r.KeyCap {
			t.Fatalf("key %d under the cap: %+v", k, r)
		}
	}
	if r := check(item("r", 3, 3, 1))[0]; r.Allowed || !r.KeyCap || r.Limit != 10 {
		t.Fatalf("new key at the cap: %+v, want KeyCap", r)
	}
	if r := check(item("r", 3, 0, 1))[0]; !r.Allowed || r.KeyCap || r.Remaining != 8 {
		t.Fatalf("existing key at the cap: %+v, want allowed with 8 left", r)
	}
	if r := check(item("r", 3, 4, 0))[0]; !r.Allowed || r.KeyCap {
		t.Fatalf("peek of a new key at the cap: %+v, want allowed (nothing stored)", r)
	}
	// Another rule has its own count, capped by Config.MaxKeys (5).
	for k := range uint64(5) {
		if r := check(item("other", 0, k, 1))[0]; !r.Allowed {
			t.Fatalf("other rule key %d: %+v", k, r)
		}
	}
	if r := check(item("other", 0, 5, 1))[0]; !r.KeyCap {
		t.Fatalf("other rule beyond Config.MaxKeys: %+v, want KeyCap", r)
	}
	// A group with a capped new key takes nothing: the existing key's
	// part is voided.
	g := []shard.Item{item("r", 3, 1, 1), item("r", 3, 7, 1)}
	g[0].Partition, g[1].Partition, g[0].Group, g[1].Group = 1, 1, 9, 9
	if out := check(g...); !out[0].Voided || !out[1].KeyCap || out[1].Allowed {
		t.Fatalf("group with a capped key: %+v", out)
	}
	if got := keys(t, e); got != 8 {
		t.Fatalf("Keys = %d, want 8 (3 + 5, nothing stored for refused keys)", got)
	}
	st, err := e.Stats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.KeyCapHits != 3 {
		t.Fatalf("KeyCapHits = %d, want 3", st.KeyCapHits)
	}

	// Once the keys idle out the rule takes new ones again.
	clk.Add(time.Minute)
	testwait.Until(t, "keys to idle out", func() bool { return keys(t, e) == 0 })
	for k := uint64(10); k < 13; k++ {
		if r := check(item("r", 3, k, 1))[0]; !r.Allowed || r.KeyCap {
			t.Fatalf("after expiry, key %d: %+v", k, r)
		}
	}
	if r := check(item("r", 3, 13, 1))[0]; !r.KeyCap {
		t.Fatalf("after expiry, fourth key: %+v, want KeyCap", r)
	}
}

// Imported counters carry no rule; the first decision counts them against
// their rule's cap, and a sliding log is counted like any counter.
func TestKeyCapImportAndLogs(t *testing.T) {
	clk := newClock()
	e := start(t, shard.Config{Shards: 1, Now: clk.Now})
	l := perSecond(10)
	var states []replication.State
	for k := range uint64(2) {
		states = append(states, replication.State{Partition: 1, ID: mix(k), A: 1, B: clk.Now()})
	}
	if err := e.Import(ctxT(t), states); err != nil {
		t.Fatal(err)
	}
	out := make([]shard.Result, 1)
	decide := func(it shard.Item) shard.Result {
		t.Helper()
		if err := e.Check(ctxT(t), []shard.Item{it}, out); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	for k := range uint64(2) {
		if r := decide(shard.Item{ID: mix(k), Partition: 1, Limit: l, Cost: 1, Cap: &shard.KeyCap{Rule: "r", MaxKeys: 3}}); r.KeyCap {
			t.Fatalf("imported key %d: %+v", k, r)
		}
	}
	lg := slidingLog(5)
	if r := decide(shard.Item{ID: mix(100), Partition: 1, Limit: lg, Cost: 1, Cap: &shard.KeyCap{Rule: "r", MaxKeys: 3}}); !r.Allowed || r.KeyCap {
		t.Fatalf("third key (a log): %+v", r)
	}
	if r := decide(shard.Item{ID: mix(101), Partition: 1, Limit: lg, Cost: 1, Cap: &shard.KeyCap{Rule: "r", MaxKeys: 3}}); !r.KeyCap {
		t.Fatalf("fourth key (a log): %+v, want KeyCap", r)
	}
	if r := decide(shard.Item{ID: mix(5), Partition: 1, Limit: l, Cost: 1, Cap: &shard.KeyCap{Rule: "r", MaxKeys: 3}}); !r.KeyCap {
		t.Fatalf("fifth key: %+v, want KeyCap", r)
	}
}

// With several shards each holds ceil(MaxKeys/Shards) keys of a rule, so
// the engine holds about MaxKeys.
func TestKeyCapAcrossShards(t *testing.T) {
	clk := newClock()
	e := start(t, shard.Config{Shards: 4, Now: clk.Now})
	l := perSecond(10)
	allowed := 0
	out := make([]shard.Result, 1)
	for k := range uint64(1000) {
		it := shard.Item{ID: mix(k), Partition: uint32(k % 64), Limit: l, Cost: 1, Cap: &shard.KeyCap{Rule: "r", MaxKeys: 100}}
		if err := e.Check(ctxT(t), []shard.Item{it}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed {
			allowed++
		}
	}
	if allowed != 100 {
		t.Fatalf("%d keys taken, want 100 (4 shards x 25)", allowed)
	}
}
