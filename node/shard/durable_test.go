package shard_test

import (
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
)

// Snapshot holds the counters whose idle deadline is an hour or more away
// (a daily fixed window, a daily sliding log), with that deadline, and
// leaves out short ones and those of rules with durable: off (Volatile).
// An engine that imports the snapshot keeps each counter's own deadline:
// its Snapshot is the same.
func TestSnapshotHoldsDurableCounters(t *testing.T) {
	clk := newClock()
	now := clk.Now()
	day := bucket.Limit{Algorithm: bucket.FixedWindow, Rate: 10, Period: 24 * time.Hour}
	dayLog := bucket.Limit{Algorithm: bucket.SlidingLog, Rate: 3, Period: 24 * time.Hour}
	e := start(t, shard.Config{Shards: 2, Now: clk.Now})
	items := []shard.Item{
		{ID: 1, Partition: 1, Limit: day, Cost: 1},
		{ID: 2, Partition: 2, Limit: dayLog, Cost: 1},
		{ID: 3, Partition: 3, Limit: perMinute(5), Cost: 1},
		{ID: 4, Partition: 4, Limit: day, Cost: 1, Volatile: true},
		{ID: 5, Partition: 4, Limit: dayLog, Cost: 1, Volatile: true},
	}
	if err := e.Check(ctxT(t), items, make([]shard.Result, len(items))); err != nil {
		t.Fatal(err)
	}
	got, err := e.Snapshot(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[uint64]replication.State{}
	for _, st := range got {
		ids[st.ID] = st
	}
	if len(got) != 2 || ids[1].ID != 1 || ids[2].ID != 2 {
		t.Fatalf("snapshot %+v, want counters 1 and 2 only", got)
	}
	for _, id := range []uint64{1, 2} {
		// The table keeps deadlines in whole seconds, rounded up.
		if st := ids[id]; st.Idle < now+int64(24*time.Hour) || st.Idle > now+int64(24*time.Hour+time.Second) {
			t.Errorf("counter %d idle %d, want a day after %d", id, st.Idle, now)
		}
	}

	clk.Add(time.Hour)
	other := start(t, shard.Config{Shards: 3, Now: clk.Now})
	if err := other.Import(ctxT(t), got); err != nil {
		t.Fatal(err)
	}
	again, err := other.Snapshot(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range again {
		if want := ids[st.ID]; st.Idle != want.Idle {
			t.Errorf("imported counter %d idle %d, want its own %d (not now + ImportIdle)", st.ID, st.Idle, want.Idle)
		}
	}
	if len(again) != 2 {
		t.Errorf("imported engine's snapshot has %d counters, want 2", len(again))
	}

	// Volatile travels: an imported volatile counter stays out.
	vol, err := e.Export(ctxT(t), []uint32{4})
	if err != nil {
		t.Fatal(err)
	}
	if len(vol) != 2 || !vol[0].Volatile || !vol[1].Volatile {
		t.Fatalf("export of volatile counters %+v, want both marked", vol)
	}
	if err := other.Import(ctxT(t), vol); err != nil {
		t.Fatal(err)
	}
	if again, _ := other.Snapshot(ctxT(t)); len(again) != 2 {
		t.Errorf("snapshot after importing volatile counters holds %d, want still 2", len(again))
	}
}

// BenchmarkSnapshot is the pause one Snapshot costs a shard: 100,000
// counters on one shard, a tenth of them durable (a daily limit).
func BenchmarkSnapshot(b *testing.B) {
	clk := newClock()
	e, err := shard.New(shard.Config{Shards: 1, Now: clk.Now})
	if err != nil {
		b.Fatal(err)
	}
	e.Start()
	defer e.Close()
	day := bucket.Limit{Algorithm: bucket.FixedWindow, Rate: 10, Period: 24 * time.Hour}
	items := make([]shard.Item, 1000)
	out := make([]shard.Result, len(items))
	for n := range 100 {
		for i := range items {
			id := uint64(n*len(items) + i + 1)
			items[i] = shard.Item{ID: id, Partition: uint32(id % 64), Limit: perMinute(5), Cost: 1}
			if id%10 == 0 {
				items[i].Limit = day
			}
		}
		if err := e.Check(b.Context(), items, out); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		st, err := e.Snapshot(b.Context())
		if err != nil || len(st) != 10000 {
			b.Fatalf("%d states, %v", len(st), err)
		}
	}
}
