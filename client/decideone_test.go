package client

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkDecideOne is one caller deciding one request at a time: the
// latency of a lone check (a gateway at low concurrency), where each
// goroutine hand-off on the way to the node and back counts.
func BenchmarkDecideOne(b *testing.B) {
	cl := benchClient(b)
	b.ResetTimer()
	for i := range b.N {
		if d := cl.Decide(context.Background(), Request{Route: "/b", Method: "GET", APIKey: "ak_" + strconv.Itoa(i%1000)}); !d.Allowed {
			b.Fatalf("%+v", d)
		}
	}
}
