package node

import (
	"context"
	"fmt"
	"net/http"

	"google.golang.org/grpc"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/api"
	"github.com/weirlimit/weir/node/forwardauth"
	"github.com/weirlimit/weir/node/rls"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// The gateway edges: Envoy's rate limit service on the gRPC port
// (node/rls) and /v1/forward-auth on the HTTP port (node/forwardauth).
// Both are thin adapters over Check.

// gatewayBackend is what the gateway edges need of the node.
type gatewayBackend struct{ n *Node }

func (b gatewayBackend) Check(ctx context.Context, items []limit.Item, out []limit.Result) error {
	return b.n.Check(ctx, items, out)
}

func (b gatewayBackend) Rules() *rules.Set { return b.n.store.Current() }

// registerGateways registers the rate limit service on g and
// forward-auth on mux.
func (n *Node) registerGateways(g *grpc.Server, mux *http.ServeMux) error {
	cfg := rls.DefaultConfig()
	cfg.HeaderStyle = n.cfg.HeaderStyle
	cfg.AllOrNothing = !n.cfg.RLSEachDescriptor
	cfg.Trust = n.cfg.RLSTrust
	cfg.Registry = n.cfg.Registry
	cfg.ErrorMapper = api.GRPCError
	s, err := rls.New(cfg, gatewayBackend{n})
	if err != nil {
		return fmt.Errorf("node: rate limit service: %w", err)
	}
	s.Register(g)
	fa, err := forwardauth.New(forwardauth.Config{HeaderStyle: n.cfg.HeaderStyle, Headers: n.cfg.ForwardAuthHeaders}, gatewayBackend{n})
	if err != nil {
		return fmt.Errorf("node: forward-auth: %w", err)
	}
	mux.Handle(forwardauth.Path, fa)
	return nil
}
