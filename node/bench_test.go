package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirlimit/weir/internal/grpcwin"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/limit"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

const benchRules = `
rules:
  - id: bench
    match: {route: /bench, method: GET, plan: "*"}
    key: apikey
    rate: 1000
    period: 1s
    burst: 1000
`

const benchKeys = 100_000

// benchCluster is a running cluster with one gRPC connection per node (as a
// gateway SDK keeps) and the bench keys grouped by owner.
type benchCluster struct {
	clients []weirv1.LimiterClient // by node index
	owned   [][]string             // keys owned by node i
	all     []string
}

func newBenchCluster(b *testing.B, size int) *benchCluster {
	c := testcluster.New(b, size)
	c.ApplyRules(benchRules)
	bc := &benchCluster{owned: make([][]string, size)}
	index := map[string]int{}
	for i, nd := range c.Nodes {
		cc, err := grpc.NewClient(nd.GRPCAddr(), append(grpcwin.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...) // as the SDK dials
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cc.Close() })
		bc.clients = append(bc.clients, weirv1.NewLimiterClient(cc))
		index[nd.ID()] = i
	}
	r := memberRing(b, c.Nodes[0])
	for k := 0; k < benchKeys; k++ {
		key := fmt.Sprintf("apikey:k%d", k)
		bc.all = append(bc.all, key)
		i := index[r.Owner(key)]
		bc.owned[i] = append(bc.owned[i], key)
	}
	return bc
}

// run drives Check RPCs of batch items each from 16 callers per GOMAXPROCS
// (with stream, CheckStream requests: one stream per caller and node).
// With owner set, every batch goes to the node owning all its keys (what
// the SDK does); otherwise to a random node with random keys, so most items
// are forwarded. It reports checks/s, CPU time and allocations per check
// and write system calls per client RPC (whole process: callers and every
// node).
func (bc *benchCluster) run(b *testing.B, batch int, owner, stream bool) {
	b.SetParallelism(16)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0, w0 := cpuTime(b), writeSyscalls()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		items := make([]*weirv1.CheckItem, batch)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel() // ends this caller's streams
		streams := make([]weirv1.Limiter_CheckStreamClient, len(bc.clients))
		var id uint64
		for pb.Next() {
			n := rng.IntN(len(bc.clients))
			keys := bc.all
			if owner {
				keys = bc.owned[n]
			}
			for i := range items {
				items[i] = &weirv1.CheckItem{Key: keys[rng.IntN(len(keys))], Rule: "bench", Cost: 1}
			}
			var results []*weirv1.CheckResult
			if stream {
				if streams[n] == nil {
					s, err := bc.clients[n].CheckStream(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					streams[n] = s
				}
				id++
				if err := streams[n].Send(&weirv1.CheckStreamRequest{Id: id, Items: items}); err != nil {
					b.Error(err)
					return
				}
				resp, err := streams[n].Recv()
				if err != nil || resp.GetId() != id || resp.GetErrorCode() != 0 {
					b.Errorf("stream: %v %v", resp, err)
					return
				}
				results = resp.GetResults()
			} else {
				resp, err := bc.clients[n].Check(ctx, &weirv1.CheckRequest{Items: items})
				if err != nil {
					b.Error(err)
					return
				}
				results = resp.GetResults()
			}
			for _, r := range results {
				if r.ErrorCode != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
					b.Errorf("check: %v %s", r.ErrorCode, r.Error)
					return
				}
			}
		}
	})
	b.StopTimer()
	cpu, writes := cpuTime(b)-cpu0, writeSyscalls()-w0
	runtime.ReadMemStats(&ms1)
	checks := float64(b.N) * float64(batch)
	b.ReportMetric(checks/b.Elapsed().Seconds(), "checks/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/checks, "cpu-ns/check")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/checks, "allocs/check")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/checks, "B/check")
	if w0 >= 0 {
		b.ReportMetric(float64(writes)/float64(b.N), "writes/rpc")
	}
}

// cpuTime is the CPU (user + system) this process has used: on a shared
// machine, CPU per check is steadier than checks per second.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeSyscalls is the number of write system calls this process made
// (syscw in /proc/self/io), or -1 where that is not available.
func writeSyscalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// BenchmarkCheck1Node drives one node over gRPC in batches of 1, 16 and 128.
func BenchmarkCheck1Node(b *testing.B) {
	bc := newBenchCluster(b, 1)
	for _, batch := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { bc.run(b, batch, true, false) })
	}
}

// BenchmarkCheck3Nodes drives a 3-node cluster: "owner" sends each batch to
// the owner of its keys (as the SDK routes), "any" to a random node, so two
// thirds of the items are forwarded.
func BenchmarkCheck3Nodes(b *testing.B) {
	bc := newBenchCluster(b, 3)
	for _, route := range []string{"owner", "any"} {
		for _, batch := range []int{1, 16, 128} {
			b.Run(fmt.Sprintf("route=%s/batch=%d", route, batch), func(b *testing.B) { bc.run(b, batch, route == "owner", false) })
		}
	}
}

// BenchmarkCheckStream3Nodes is BenchmarkCheck3Nodes with every caller
// sending its batches over one CheckStream per node (as the SDK's senders
// do), one request in flight at a time, instead of unary Check RPCs.
func BenchmarkCheckStream3Nodes(b *testing.B) {
	bc := newBenchCluster(b, 3)
	for _, route := range []string{"owner", "any"} {
		for _, batch := range []int{1, 16, 128} {
			b.Run(fmt.Sprintf("route=%s/batch=%d", route, batch), func(b *testing.B) { bc.run(b, batch, route == "owner", true) })
		}
	}
}

// BenchmarkNodeCheck calls Node.Check in process on a 1-node cluster (no
// gRPC): the node's own cost per batch, shards included.
func BenchmarkNodeCheck(b *testing.B) {
	c := testcluster.New(b, 1)
	c.ApplyRules(benchRules)
	nd := c.Nodes[0]
	keys := make([]string, benchKeys)
	for k := range keys {
		keys[k] = fmt.Sprintf("apikey:k%d", k)
	}
	for _, batch := range []int{1, 16, 128} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			b.SetParallelism(16)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
				items, out := make([]limit.Item, batch), make([]limit.Result, batch)
				for i := range items {
					items[i] = limit.Item{Rule: "bench", Cost: 1}
				}
				for pb.Next() {
					for i := range items {
						items[i].Key = keys[rng.IntN(len(keys))]
					}
					if err := nd.Check(context.Background(), items, out); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(b.N)*float64(batch)), "ns/check")
		})
	}
}

// BenchmarkNodeCheckForwarded calls Node.Check in process on one node of a
// 3-node cluster with keys the other two own, one item a check: the
// forward path's own cost and allocations (the forward stream, the peer's
// decision and the answer), with 1 and 16 callers per core (SetParallelism).
func BenchmarkNodeCheckForwarded(b *testing.B) {
	c := testcluster.New(b, 3)
	c.ApplyRules(benchRules)
	c.WaitStable(3)
	nd := c.Nodes[0]
	r := memberRing(b, nd)
	var keys []string
	for k := 0; len(keys) < 1000; k++ {
		if key := fmt.Sprintf("apikey:k%d", k); r.Owner(key) != nd.ID() {
			keys = append(keys, key)
		}
	}
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("parallelism=%d", callers), func(b *testing.B) {
			b.SetParallelism(callers)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
				items, out := []limit.Item{{Rule: "bench", Cost: 1}}, make([]limit.Result, 1)
				for pb.Next() {
					items[0].Key = keys[rng.IntN(len(keys))]
					if err := nd.Check(context.Background(), items, out); err != nil || out[0].Code != limit.CodeNone {
						b.Errorf("%v %v", err, out[0])
						return
					}
				}
			})
		})
	}
}
