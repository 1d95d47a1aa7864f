package shard_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node/shard"
)

var memKeys = flag.Int("memkeys", 100_000, "distinct counters TestMemoryPerKey inserts")

// memPartitions is the partition count used by the memory measurements:
// keys spread over partitions as the ring spreads them.
const memPartitions = 1024

// memStats reads the heap after two collections (the second frees what
// the first's finalizers released).
func memStats() runtime.MemStats {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms
}

func heapAlloc() uint64 { return memStats().HeapAlloc }

// TestMemoryPerKey inserts -memkeys distinct counters, reports the heap
// bytes they cost, lets them idle out and reports how much came back.
func TestMemoryPerKey(t *testing.T) {
	n := *memKeys
	clk := newClock()
	e, err := shard.New(shard.Config{Now: clk.Now, SweepEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	defer e.Close()
	const batch = 256
	items := make([]shard.Item, batch)
	out := make([]shard.Result, batch)
	l := perSecond(10)
	ctx := context.Background()

	before := heapAlloc()
	for i := 0; i < n; i += batch {
		k := min(batch, n-i)
		for j := range k {
			id := mix(uint64(i + j))
			items[j] = shard.Item{ID: id, Partition: uint32(id % memPartitions), Limit: l, Cost: 1}
		}
		if err := e.Check(ctx, items[:k], out[:k]); err != nil {
			t.Fatal(err)
		}
	}
	if got := keys(t, e); got != n {
		t.Fatalf("Keys = %d, want %d", got, n)
	}
	after := heapAlloc()
	per := float64(after-before) / float64(n)
	t.Logf("%d counters over %d partitions: %d bytes, %.1f bytes/counter", n, memPartitions, after-before, per)
	// A table costs 38 bytes a counter at 53% to 80% full (48 to 71);
	// issue 17's target is 64 at 1M keys (-memkeys 1000000: 59.9).
	if per > 72 {
		t.Errorf("%.1f bytes per counter, want <= 72", per)
	}

	clk.Add(time.Hour)
	testwait.Until(t, "every counter to idle out", func() bool { return keys(t, e) == 0 })
	final := heapAlloc()
	var returned uint64
	if after > final {
		returned = after - final
	}
	t.Logf("after idle expiry: %d bytes returned (%.0f%% of what the counters took)",
		returned, 100*float64(returned)/float64(after-before))
	if final > before+(after-before)/10 {
		t.Errorf("heap %d after expiry, want within 10%% of %d before insert", final, before)
	}
}

// TestEntryLayout measures the two candidate per-counter layouts in plain
// Go maps (the engine uses its own table, see TestMemoryPerKey): state +
// idle deadline (chosen) versus state + the last Limit.
func TestEntryLayout(t *testing.T) {
	n := *memKeys
	type withDeadline struct {
		s    bucket.State
		idle int64
	}
	type withLimit struct {
		s bucket.State
		l bucket.Limit
	}
	measure := func(fill func(maps int)) float64 {
		b := heapAlloc()
		fill(memPartitions)
		return float64(heapAlloc()-b) / float64(n)
	}
	var keep1 []map[uint64]withDeadline
	d := measure(func(maps int) {
		keep1 = make([]map[uint64]withDeadline, maps)
		for i := range n {
			id := mix(uint64(i))
			m := &keep1[id%uint64(maps)]
			if *m == nil {
				*m = map[uint64]withDeadline{}
			}
			(*m)[id] = withDeadline{}
		}
	})
	runtime.KeepAlive(keep1)
	keep1 = nil
	var keep2 []map[uint64]withLimit
	w := measure(func(maps int) {
		keep2 = make([]map[uint64]withLimit, maps)
		for i := range n {
			id := mix(uint64(i))
			m := &keep2[id%uint64(maps)]
			if *m == nil {
				*m = map[uint64]withLimit{}
			}
			(*m)[id] = withLimit{}
		}
	})
	runtime.KeepAlive(keep2)
	t.Logf("%d counters: state+deadline %.1f B/counter, state+limit %.1f B/counter", n, d, w)
	if d >= w {
		t.Errorf("deadline layout (%.1f) not smaller than limit layout (%.1f)", d, w)
	}
}

// mix is splitmix64: distinct, well-spread counter ids.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

var (
	floodKeys   = flag.Int("floodkeys", 1_000_000, "distinct keys TestFloodMemoryReturns floods a node with")
	floodSettle = flag.Duration("floodsettle", 0, "how long TestFloodMemoryReturns waits after expiry before it reports RSS again (measurement only)")
)

// rssKiB is the process's resident set (Linux; 0 elsewhere), for the log.
func rssKiB() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

func heapInuse() uint64 { return memStats().HeapInuse }

// TestFloodMemoryReturns floods an engine with default sweep settings with
// -floodkeys unique keys, lets them all pass their idle deadline, and
// checks that the live heap is back near its baseline within the bound the
// engine promises, 2*(SweepPass+SweepEvery) = 12 s after the deadline, however
// many keys there were (the 15.5M-key flood of issue 12 took minutes).
func TestFloodMemoryReturns(t *testing.T) {
	n := *floodKeys
	clk := newClock()
	e, err := shard.New(shard.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	defer e.Close()
	ctx := context.Background()
	base, baseRSS := heapInuse(), rssKiB()

	const batch = 256
	items := make([]shard.Item, batch)
	out := make([]shard.Result, batch)
	l := perSecond(10)
	for i := 0; i < n; i += batch {
		k := min(batch, n-i)
		for j := range k {
			id := mix(uint64(i + j))
			items[j] = shard.Item{ID: id, Partition: uint32(id % memPartitions), Limit: l, Cost: 1}
		}
		if err := e.Check(ctx, items[:k], out[:k]); err != nil {
			t.Fatal(err)
		}
	}
	peak, peakRSS := heapInuse(), rssKiB()
	if got := keys(t, e); got != n {
		t.Fatalf("Keys = %d, want %d", got, n)
	}

	clk.Add(time.Minute) // every key is past its idle deadline
	began := time.Now()
	d := shard.DefaultConfig()
	bound := 2 * (d.SweepPass + d.SweepEvery)
	// The engine's bound is 12 s; the wait allows 5 s more for a machine
	// loaded by -race and other tests (the time taken is logged).
	testwait.For(t, bound+5*time.Second, "every key to idle out", func() error {
		if k := keys(t, e); k != 0 {
			return fmt.Errorf("%d keys left", k)
		}
		return nil
	})
	took := time.Since(began)
	final := heapInuse()
	t.Logf("RSS %d KiB before, %d KiB flooded, %d KiB after expiry (%d releases)", baseRSS, peakRSS, rssKiB(), stats(t, e).Releases)
	if *floodSettle > 0 {
		time.Sleep(*floodSettle) // a measurement, not a wait for a condition
		t.Logf("RSS %d KiB %v later (%d releases)", rssKiB(), *floodSettle, stats(t, e).Releases)
	}
	t.Logf("%d keys: heap in use %d KiB before, %d KiB flooded, %d KiB %v after the deadline",
		n, base>>10, peak>>10, final>>10, took.Round(100*time.Millisecond))
	if limit := 2*base + 8<<20; final > limit {
		t.Errorf("heap in use %d after expiry, want <= %d (2x baseline %d + 8 MiB)", final, limit, base)
	}
}

func stats(t *testing.T, e *shard.Engine) shard.Stats {
	t.Helper()
	st, err := e.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}
