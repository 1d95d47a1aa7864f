package shard_test

import (
	"slices"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/sched/schedtest"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
)

var simStart = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// changes collects what OnChange reported, in order.
type changes struct{ got []replication.State }

func (c *changes) onChange(states []replication.State) { c.got = append(c.got, states...) }

// An engine's goroutines start through its seam; an Inline engine starts
// none and decides on the caller's goroutine, on the seam's clock (Now
// left nil).
func TestInlineEngineRunsOnTheSeamsClock(t *testing.T) {
	sim := schedtest.New(1, simStart)
	e, err := shard.New(shard.Config{Shards: 3, Sched: sim})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	in := start(t, shard.Config{Shards: 3, Sched: sim, Inline: true})
	if n := sim.Queued(); n != 4 {
		t.Errorf("the engines queued %d goroutines on the seam, want 3 shards and the releaser (and none inline)", n)
	}
	closed := make(chan struct{})
	go func() { defer close(closed); e.Close() }()
	sim.RunAll() // the queued goroutines see the engine closed and return
	<-closed
	it := shard.Item{ID: 1, Partition: 5, Limit: perSecond(1), Cost: 1}
	if !check1(t, in, it).Allowed {
		t.Fatal("first token denied")
	}
	if check1(t, in, it).Allowed {
		t.Fatal("second token in the same (simulated) second allowed")
	}
	sim.Advance(time.Second)
	if !check1(t, in, it).Allowed {
		t.Fatal("a token a simulated second later denied: the engine does not read the seam's clock")
	}
}

// A sweep pass walks partitions in order, and a partition's sliding logs
// expire and export in id order: what OnChange and Export report never
// depends on map iteration. The Inline engine sweeps when told (Tick).
func TestSweepAndExportInOrder(t *testing.T) {
	sim := schedtest.New(1, simStart)
	ch := &changes{}
	e := start(t, shard.Config{Shards: 1, Sched: sim, Inline: true, OnChange: ch.onChange})
	var parts []uint32
	for p := range uint32(40) {
		parts = append(parts, (p*17)%40) // decided out of order
	}
	for i, p := range parts {
		check1(t, e, shard.Item{ID: uint64(1000 + i), Partition: p, Limit: perSecond(5), Cost: 1})
	}
	var logIDs []uint64
	for i := range 40 {
		id := uint64(7919*i%1000 + 1)
		logIDs = append(logIDs, id)
		check1(t, e, shard.Item{ID: id, Partition: 3, Limit: slidingLog(5), Cost: 1})
	}
	exp, err := e.Export(ctxT(t), []uint32{3})
	if err != nil {
		t.Fatal(err)
	}
	var exported []uint64
	for _, st := range exp {
		if st.Log != nil {
			exported = append(exported, st.ID)
		}
	}
	if !slices.IsSorted(exported) || len(exported) != len(logIDs) {
		t.Errorf("exported logs %v: want all %d, in id order", exported, len(logIDs))
	}
	ch.got = nil
	sim.Advance(time.Hour)
	if err := e.Tick(); err != nil {
		t.Fatal(err)
	}
	if n := keys(t, e); n != 0 {
		t.Fatalf("%d counters left after an hour idle and a sweep", n)
	}
	var swept []uint32
	var logs []uint64
	for _, st := range ch.got {
		if st.Log != nil {
			logs = append(logs, st.ID)
		} else {
			swept = append(swept, st.Partition)
		}
	}
	if !slices.IsSorted(swept) || len(swept) != len(parts) {
		t.Errorf("expired counters by partition %v: want all %d, in partition order", swept, len(parts))
	}
	if !slices.IsSorted(logs) || len(logs) != len(logIDs) {
		t.Errorf("expired logs %v: want all %d, in id order", logs, len(logIDs))
	}
}
