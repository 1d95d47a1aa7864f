package shard

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/replication"
)

// BenchmarkShardDecide decides batches on one shard directly, without
// goroutines or channels: what the shard goroutine itself spends per item,
// with changed states reported (to a no-op) as in a node.
func BenchmarkShardDecide(b *testing.B) {
	for _, batch := range []int{16, 128} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.OnChange = func([]replication.State) {}
			s := newShard(&cfg)
			l := bucket.Limit{Rate: 1_000_000, Period: time.Second}
			rng := rand.New(rand.NewPCG(1, 2))
			items := make([]Item, batch)
			out := make([]Result, batch)
			now := int64(1)
			b.ReportAllocs()
			for b.Loop() {
				for j := range items {
					id := rng.Uint64() % 100_000 * 0x9e3779b97f4a7c15
					items[j] = Item{ID: id, Partition: uint32(id % 1024), Limit: l, Cost: 1}
				}
				now += 1000
				s.check(items, out, now)
				s.flush()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/item")
		})
	}
}
