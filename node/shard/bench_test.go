package shard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
)

// BenchmarkCheck: parallel callers, each Check carrying `batch` items for
// random keys among 100,000 spread over 1024 partitions; with onchange, the
// engine reports changed states (to a no-op), as a node's does.
func BenchmarkCheck(b *testing.B) {
	for _, c := range []struct {
		batch    int
		onChange bool
	}{{1, false}, {32, false}, {32, true}, {128, true}} {
		batch := c.batch
		b.Run(fmt.Sprintf("batch=%d/onchange=%v", batch, c.onChange), func(b *testing.B) {
			cfg := shard.Config{}
			if c.onChange {
				cfg.OnChange = func([]replication.State) {}
			}
			e, err := shard.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			e.Start()
			defer e.Close()
			l := bucket.Limit{Rate: 1_000_000, Period: time.Second}
			const nkeys = 100_000
			b.SetParallelism(16)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
				items := make([]shard.Item, batch)
				out := make([]shard.Result, batch)
				for pb.Next() {
					for j := range items {
						id := mix(rng.Uint64N(nkeys))
						items[j] = shard.Item{ID: id, Partition: uint32(id % 1024), Limit: l, Cost: 1}
					}
					if err := e.Check(context.Background(), items, out); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "items/s")
		})
	}
}

// BenchmarkCheckSerial: one caller at a time (a quiet node), one item per
// Check: what a lone check pays to reach its shard and come back.
func BenchmarkCheckSerial(b *testing.B) {
	e, err := shard.New(shard.Config{OnChange: func([]replication.State) {}})
	if err != nil {
		b.Fatal(err)
	}
	e.Start()
	defer e.Close()
	l := bucket.Limit{Rate: 1_000_000, Period: time.Second}
	rng := rand.New(rand.NewPCG(1, 2))
	items := make([]shard.Item, 1)
	out := make([]shard.Result, 1)
	b.ReportAllocs()
	for b.Loop() {
		id := mix(rng.Uint64N(100_000))
		items[0] = shard.Item{ID: id, Partition: uint32(id % 1024), Limit: l, Cost: 1}
		if err := e.Check(context.Background(), items, out); err != nil {
			b.Fatal(err)
		}
	}
}
