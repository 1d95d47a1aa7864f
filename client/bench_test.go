package client

import (
	"context"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
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
	cl := newTestClient(b, c, "bench", nil)
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
