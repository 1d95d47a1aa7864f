package client

import (
	"context"
	rtmetrics "runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/rulesraft/rules"
)

const benchRules = `
rules:
  - id: bench
    match: {route: /b}
    key: apikey
    rate: 1000000000
    period: 1s
  - id: benchlease
    match: {route: /l}
    key: apikey
    rate: 1000000000
    period: 1s
    lease: 1000
`

func benchClient(b *testing.B) *Client {
	c := testcluster.New(b, 1)
	v := c.ApplyRules(benchRules)
	cl := newTestClient(b, c, "bench", func(cfg *Config) { cfg.Registry = prometheus.NewRegistry() })
	testwait.For(b, 10*time.Second, "the client ready", func() error {
		if cl.RulesVersion() < v || cl.view.Load() == nil {
			return context.DeadlineExceeded
		}
		return nil
	})
	return cl
}

func BenchmarkDecide(b *testing.B) {
	cl := benchClient(b)
	var n atomic.Int64
	b.SetParallelism(32)
	sched0 := schedLatencies()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := "ak_" + strconv.FormatInt(n.Add(1), 10)
		for pb.Next() {
			if d := cl.Decide(context.Background(), Request{Route: "/b", Method: "GET", APIKey: key}); !d.Allowed {
				b.Errorf("%+v", d)
				return
			}
		}
	})
	s := cl.Stats()
	if s.RPCs > 0 {
		b.ReportMetric(float64(s.Items)/float64(s.RPCs), "items/rpc")
	}
	b.ReportMetric(float64(s.Fallbacks), "fallbacks")
	// Runnable goroutines waiting for a CPU: when this is in milliseconds,
	// timeouts come from starvation, not from the client or the node.
	p99, over := schedDelta(sched0, schedLatencies(), 0.99, rules.DefaultTimeout.Seconds())
	b.ReportMetric(p99*1e3, "sched-p99-ms")
	if s.Fallbacks > 0 {
		b.Logf("fallbacks by reason %v; breaker opens %d; scheduler waits over %v: %d",
			fallbackReasons(b, cl.cfg.Registry), s.BreakerOpens, rules.DefaultTimeout, over)
	}
}

// schedLatencies reads the runtime's histogram of how long runnable
// goroutines waited for a CPU.
func schedLatencies() *rtmetrics.Float64Histogram {
	sm := []rtmetrics.Sample{{Name: "/sched/latencies:seconds"}}
	rtmetrics.Read(sm)
	if sm[0].Value.Kind() != rtmetrics.KindFloat64Histogram {
		return nil
	}
	return sm[0].Value.Float64Histogram()
}

// schedDelta returns the q-quantile (seconds, bucket upper bound) of the
// waits between two readings, and how many waits exceeded limit seconds.
func schedDelta(a, b *rtmetrics.Float64Histogram, q, limit float64) (float64, uint64) {
	if a == nil || b == nil || len(a.Counts) != len(b.Counts) {
		return 0, 0
	}
	var total, over uint64
	d := make([]uint64, len(b.Counts))
	for i := range d {
		d[i] = b.Counts[i] - a.Counts[i]
		total += d[i]
		if b.Buckets[i] >= limit {
			over += d[i]
		}
	}
	var seen uint64
	for i, c := range d {
		seen += c
		if total > 0 && float64(seen) >= q*float64(total) {
			return min(b.Buckets[i+1], 10), over
		}
	}
	return 0, over
}

func BenchmarkDecideLeased(b *testing.B) {
	cl := benchClient(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d := cl.Decide(context.Background(), Request{Route: "/l", Method: "GET", APIKey: "hot"}); !d.Allowed {
				b.Errorf("%+v", d)
				return
			}
		}
	})
}
