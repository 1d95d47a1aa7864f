package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/proto/weirv1"
)

// slowRule has the longest timeout there is, so a call that fails on it
// failed because its stream broke, not because it timed out.
const slowRule = `
  - id: slow
    match: {route: /slow}
    key: apikey
    rate: 1
    period: 1h
    burst: 10
    timeout: 10s
`

// TestStreamBrokenMidFlight breaks the connection (and with it the
// CheckStream) while a check waits for its answer: the waiting call falls
// back at once (reason "unavailable", not "timeout"), the failure counts
// once, and the next checks are decided by the cluster over a new stream.
// The broken request never reached the node, so the counter is exact.
func TestStreamBrokenMidFlight(t *testing.T) {
	lk, reg := newLink(), prometheus.NewRegistry()
	c := testcluster.New(t, 1)
	v := c.ApplyRules(testRules + slowRule)
	gw := newTestClient(t, c, "gw1", func(cfg *Config) { cfg.Dial, cfg.Registry = lk.Dial, reg })
	testwait.For(t, 10*time.Second, "the client ready", func() error {
		if got := gw.RulesVersion(); got < v || gw.view.Load() == nil {
			return fmt.Errorf("client has version %d (want %d) or no member view", got, v)
		}
		return nil
	})
	ctx := context.Background()
	req := Request{Route: "/slow", Method: "GET", APIKey: "ak_s"}
	if d := gw.Decide(ctx, req); !d.Allowed || d.Limits[0].Fallback || d.Limits[0].Remaining != 9 {
		t.Fatalf("first decision: %+v", d)
	}

	s0, r0 := gw.Stats(), fallbackReasons(t, reg)
	lk.Cut() // the next request is sent and never answered
	done := make(chan Decision, 1)
	go func() { done <- gw.Decide(ctx, req) }()
	testwait.For(t, 10*time.Second, "the request in flight", func() error {
		if gw.Stats().RPCs == s0.RPCs {
			return fmt.Errorf("not sent yet")
		}
		return nil
	})
	lk.Restore() // closes every connection: the stream breaks under the waiting call
	var d Decision
	select {
	case d = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting call did not return after its stream broke")
	}
	if l := d.Limits[0]; !l.Fallback {
		t.Fatalf("decision on the broken stream: %+v, want a fallback", d)
	}
	s1, r1 := gw.Stats(), fallbackReasons(t, reg)
	if r1["unavailable"]-r0["unavailable"] != 1 || r1["timeout"] != r0["timeout"] {
		t.Errorf("fallback reasons went from %v to %v; want one more unavailable and no timeout", r0, r1)
	}
	if s1.RPCErrors-s0.RPCErrors != 1 || s1.BreakerOpens != s0.BreakerOpens {
		t.Errorf("after the break: %d request errors and %d breaker opens; want 1 and 0", s1.RPCErrors-s0.RPCErrors, s1.BreakerOpens-s0.BreakerOpens)
	}

	// Recovery: a new stream. Fallbacks while reconnecting charge nothing on
	// the node, so exactly one more token is gone when the cluster answers.
	var last Decision
	testwait.For(t, 20*time.Second, "a decision from the cluster after the break", func() error {
		last = gw.Decide(ctx, req)
		if last.Limits[0].Fallback {
			return fmt.Errorf("still a fallback: %+v", last)
		}
		return nil
	})
	if l := last.Limits[0]; !last.Allowed || l.Remaining != 8 {
		t.Errorf("after recovery: %+v, want allowed with 8 of 10 left", l)
	}
}

// unaryOnly is a node of an older version: it serves unary Check (passed
// on to a real node) and answers Unimplemented to CheckStream.
type unaryOnly struct {
	weirv1.UnimplementedLimiterServer
	to weirv1.LimiterClient
}

func (u *unaryOnly) Check(ctx context.Context, req *weirv1.CheckRequest) (*weirv1.CheckResponse, error) {
	return u.to.Check(ctx, req)
}

// TestStreamUnimplementedFallsBackToUnary sends checks to a node that does
// not serve CheckStream: they are answered through unary Check, exactly,
// and the Unimplemented answer is no failure.
func TestStreamUnimplementedFallsBackToUnary(t *testing.T) {
	c, gw := startWith(t, nil)
	front := testcluster.Front(t, c.GRPCAddrs()[0], func(s *grpc.Server, to *grpc.ClientConn) {
		weirv1.RegisterLimiterServer(s, &unaryOnly{to: weirv1.NewLimiterClient(to)})
	})

	nc, err := gw.conn(front)
	if err != nil {
		t.Fatal(err)
	}
	s0 := gw.Stats()
	for i := range 2 {
		cl := gw.newCall()
		cl.add("apikey:ak_u", "exact", 1, 0, 0, 0)
		cl.deadline, cl.timeout = gw.now().Add(10*time.Second), 10*time.Second
		if err := nc.enqueue(cl); err != nil {
			t.Fatal(err)
		}
		r := <-cl.done
		if r.err != nil || len(r.res) != 1 || !r.res[0].GetAllowed() || r.res[0].GetRemaining() != int64(2-i) {
			t.Fatalf("check %d through an older node: %v %v, want allowed with %d of 3 left", i+1, r.res, r.err, 2-i)
		}
	}
	if !nc.legacy.Active() {
		t.Error("the connection did not switch to unary Check")
	}
	if s1 := gw.Stats(); s1.RPCs-s0.RPCs != 2 || s1.RPCErrors != s0.RPCErrors || nc.breakerOpen() {
		t.Errorf("%d requests, %d errors, breaker open %v; want 2, 0, false", s1.RPCs-s0.RPCs, s1.RPCErrors-s0.RPCErrors, nc.breakerOpen())
	}
}
