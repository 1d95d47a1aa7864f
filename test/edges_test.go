package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node/authz"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// Issue 25, finding 6: 200 Watch streams with made-up gateway ids on one
// connection made every SDK gateway's fail-open share burst/201. A
// gateway id is bound to its caller (here, with no gateway credential, the
// connection), which holds at most authz.MaxGatewayIDsPerConn ids.
func TestGhostWatchesDoNotShrinkShares(t *testing.T) {
	c := newCluster(t, 1)
	v0 := c.ApplyRules(exactRules)
	n := c.Live()[0]
	cfg := client.DefaultConfig()
	cfg.Cluster, cfg.GatewayID = []string{n.GRPCAddr()}, "real"
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	testwait.For(t, 20*time.Second, "the gateway to hold the rules and be counted", func() error {
		if cl.RulesVersion() < v0 || n.Gateways() != 1 {
			return fmt.Errorf("version %d, node counts %d gateways", cl.RulesVersion(), n.Gateways())
		}
		return nil
	})
	before := cl.Gateways()

	cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	accepted, refused := 0, 0
	for i := 0; i < 200; i++ {
		st, err := weirv1.NewRulesClient(cc).Watch(ctx, &weirv1.WatchRequest{GatewayId: fmt.Sprintf("ghost-%d", i)})
		if err == nil {
			_, err = st.Recv()
		}
		switch status.Code(err) {
		case codes.OK:
			accepted++
		case codes.ResourceExhausted:
			refused++
		default:
			t.Fatalf("ghost %d: %v", i, err)
		}
	}
	if got := int(n.Gateways()); got != 1+accepted || accepted > authz.MaxGatewayIDsPerConn {
		t.Fatalf("node counts %d gateways after %d ghost watches accepted on one connection (at most %d may be)", got, accepted, authz.MaxGatewayIDsPerConn)
	}
	v1 := c.ApplyRules(exactRules + `
  - id: ghosts
    match: {route: /ghosts}
    key: global
    rate: 1
    period: 1h
`)
	testwait.For(t, 20*time.Second, "the gateway to hear the count", func() error {
		if cl.RulesVersion() < v1 || cl.Gateways() != 1+accepted {
			return fmt.Errorf("version %d, %d gateways", cl.RulesVersion(), cl.Gateways())
		}
		return nil
	})
	t.Logf("fail-open share: burst/%d before, burst/%d after 200 ghost watches on one connection (%d accepted, %d refused)",
		before, cl.Gateways(), accepted, refused)
}
