package node_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
)

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// listServices asks the node's reflection service for its services.
func listServices(ctx context.Context, cc *grpc.ClientConn) ([]string, error) {
	st, err := reflectpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	defer st.CloseSend()
	if err := st.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil {
		return nil, err
	}
	resp, err := st.Recv()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		out = append(out, s.GetName())
	}
	slices.Sort(out)
	return out, nil
}

// grpc.health.v1 says SERVING once the node is ready, for the node ("")
// and each of its services, and NOT_SERVING from the moment it starts
// leaving (a Watch sees the change). Reflection lists Weir's services, and
// is off with GRPCReflection false.
func TestHealthAndReflection(t *testing.T) {
	c := testcluster.New(t, 1)
	n := c.Nodes[0]
	cc := dial(t, n.GRPCAddr())
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, svc := range []string{"", "weir.v1.Limiter", "weir.v1.Rules", "weir.v1.Cluster"} {
		testwait.For(t, 5*time.Second, "SERVING for "+svc, func() error {
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil {
				return err
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return errors.New(resp.GetStatus().String())
			}
			return nil
		})
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown service: %v, want NotFound", err)
	}
	svcs, err := listServices(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"grpc.health.v1.Health", "weir.v1.Cluster", "weir.v1.Limiter", "weir.v1.Rules"} {
		if !slices.Contains(svcs, want) {
			t.Errorf("reflection lists %v, lacks %s", svcs, want)
		}
	}

	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := watch.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", m, err)
	}
	leaveDone := make(chan error, 1)
	go func() { leaveDone <- n.Leave(ctx) }()
	if m, err := watch.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch while leaving: %v %v, want NOT_SERVING", m, err)
	}
	if err := <-leaveDone; err != nil {
		t.Fatalf("leave: %v", err)
	}

	cfg := testcluster.Config(t, "quiet")
	cfg.BootstrapExpect = 1
	cfg.GRPCReflection = false
	q := c.Start(cfg)
	if _, err := listServices(ctx, dial(t, q.GRPCAddr())); status.Code(err) != codes.Unimplemented {
		t.Errorf("reflection with GRPCReflection false: %v, want Unimplemented", err)
	}
}

// A node whose peers are gone (killed, not yet declared dead) does not wait
// its whole LeaveTimeout for a hand-off nobody can take: Leave returns with
// ErrNoPeers once no other member in the ring has answered for 2 s (or
// gossip has none left).
func TestLeaveWithPeersGoneReturnsEarly(t *testing.T) {
	c := testcluster.New(t, 3)
	c.Kill(1)
	c.Kill(2)
	n := c.Nodes[0]
	start := time.Now()
	err := n.Leave(context.Background())
	took := time.Since(start)
	if !errors.Is(err, node.ErrNoPeers) {
		t.Fatalf("Leave: %v, want ErrNoPeers", err)
	}
	if limit := 10 * time.Second; took >= limit/2 {
		t.Fatalf("Leave took %v with its peers gone; LeaveTimeout is %v", took, limit)
	}
	t.Logf("Leave with both peers killed returned after %v (failure detection)", took.Round(time.Millisecond))
}
