package node_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/limit"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// legacyPeer is a node built before ForwardStream: it relays the unary
// Peer RPCs to the real node behind it and answers Unimplemented to
// ForwardStream (from the embedded UnimplementedPeerServer).
type legacyPeer struct {
	weirv1.UnimplementedPeerServer
	real       weirv1.PeerClient
	forwards   atomic.Int64
	replicates atomic.Int64
}

func (p *legacyPeer) Forward(ctx context.Context, req *weirv1.CheckRequest) (*weirv1.CheckResponse, error) {
	p.forwards.Add(1)
	return p.real.Forward(ctx, req)
}

func (p *legacyPeer) Replicate(ctx context.Context, req *weirv1.ReplicateRequest) (*weirv1.ReplicateResponse, error) {
	p.replicates.Add(1)
	return p.real.Replicate(ctx, req)
}

func (p *legacyPeer) Handoff(ctx context.Context, req *weirv1.HandoffRequest) (*weirv1.HandoffResponse, error) {
	return p.real.Handoff(ctx, req)
}

// A node whose peers answer Unimplemented to ForwardStream and
// ReplicateStream (older nodes) forwards with unary Forward RPCs and
// replicates with unary Replicate RPCs instead, and its decisions stay
// exact.
func TestForwardFallsBackToUnary(t *testing.T) {
	c := testcluster.New(t, 2)
	v := c.ApplyRules(checkRules)

	// Every peer link of the node started below reaches a legacy front
	// of the peer instead of the peer itself.
	legacy := map[string]*legacyPeer{} // by the real peer's gRPC address
	fronts := map[string]string{}      // real gRPC address -> legacy front's
	for _, nd := range c.Nodes {
		lp := &legacyPeer{}
		fronts[nd.GRPCAddr()] = testcluster.Front(t, nd.GRPCAddr(), func(s *grpc.Server, to *grpc.ClientConn) {
			lp.real = weirv1.NewPeerClient(to)
			weirv1.RegisterPeerServer(s, lp)
		})
		legacy[nd.GRPCAddr()] = lp
	}
	cfg := testcluster.Config(t, "n3")
	cfg.Join = []string{c.Nodes[0].GossipAddr()}
	cfg.PeerDialer = func(ctx context.Context, addr string) (net.Conn, error) {
		if front, ok := fronts[addr]; ok {
			addr = front
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	entry := c.Start(cfg)
	c.WaitStable(3)
	testwait.For(t, 10*time.Second, "the rules on the new node", func() error {
		if s := entry.Store().Current(); s == nil || s.Version < v {
			return fmt.Errorf("n3 has not applied version %d yet", v)
		}
		return nil
	})
	local, remote := keysByOwner(t, entry)

	for round := 0; round < 5; round++ {
		res := make([]limit.Result, 1)
		if err := entry.Check(context.Background(), []limit.Item{{Key: remote, Rule: "three", Cost: 1}}, res); err != nil {
			t.Fatal(err)
		}
		if want := round < 3; res[0].Code != limit.CodeNone || res[0].Allowed != want {
			t.Fatalf("round %d: %v, want allowed=%v", round, res[0], want)
		}
	}
	var forwards int64
	for _, lp := range legacy {
		forwards += lp.forwards.Load()
	}
	if forwards < 5 {
		t.Fatalf("legacy peers saw %d unary Forward RPCs for 5 forwarded checks", forwards)
	}

	// n3's own decisions reach its replica through the legacy front.
	if err := entry.Check(context.Background(), []limit.Item{{Key: local, Rule: "three", Cost: 1}}, make([]limit.Result, 1)); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a unary Replicate RPC at a legacy peer", func() bool {
		for _, lp := range legacy {
			if lp.replicates.Load() > 0 {
				return true
			}
		}
		return false
	})
}

// A member that leaves takes its forwarder (senders and streams) with it;
// checks go on through the members that stay.
func TestForwarderPrunedWhenMemberLeaves(t *testing.T) {
	c := testcluster.New(t, 3)
	c.ApplyRules(checkRules)
	entry, leaver := c.Nodes[0], c.Nodes[2]
	r := memberRing(t, entry)
	// Keys the leaver owns: entry forwards them to it (or, for partitions
	// the leaver took from n2, to n2, which names it). 300 keys reach it
	// directly with certainty for all practical purposes.
	var keys []string
	for k := 0; k < 100_000 && len(keys) < 300; k++ {
		if key := fmt.Sprintf("apikey:f%d", k); r.Owner(key) == leaver.ID() {
			keys = append(keys, key)
		}
	}
	check := func() {
		t.Helper()
		items := make([]limit.Item, len(keys))
		for i, key := range keys {
			items[i] = limit.Item{Key: key, Rule: "three", Cost: 1}
		}
		res := make([]limit.Result, len(items))
		if err := entry.Check(context.Background(), items, res); err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Code != limit.CodeNone {
				t.Fatalf("check of %s: %v", keys[i], r)
			}
		}
	}
	check()
	before := metricValue(t, entry.HTTPAddr(), "weir_forward_destinations")
	if before != "1" && before != "2" {
		t.Fatalf("weir_forward_destinations = %s, want 1 or 2", before)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := leaver.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	c.Kill(2)
	want := "0"
	if before == "2" {
		want = "1"
	}
	testwait.For(t, 10*time.Second, "the departed member's forwarder to go", func() error {
		if got := metricValue(t, entry.HTTPAddr(), "weir_forward_destinations"); got != want {
			return fmt.Errorf("weir_forward_destinations = %s, want %s", got, want)
		}
		return nil
	})
	check()
}

// metricValue is the value of an unlabelled metric on a node's /metrics.
func metricValue(t *testing.T, addr, name string) string {
	t.Helper()
	for _, line := range strings.Split(scrape(t, addr), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return ""
}
