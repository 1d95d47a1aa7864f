package bench

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weirlimit/weir/internal/grpcwin"
)

// RLSDomain is the rate limit service domain of the bench's descriptor
// rules (Scenario.RLSRulesYAML).
const RLSDomain = "bench"

// RLSRulesYAML renders s's rules as descriptor rules for the Envoy rate
// limit service target: rule "rls.<id>" matches the descriptor
// [(bench_rule, <id>), (apikey, *)] in domain RLSDomain, with the same
// token bucket as RulesYAML's rule.
func (s Scenario) RLSRulesYAML() string {
	var b strings.Builder
	for _, r := range s.Rules {
		fmt.Fprintf(&b, "  - id: rls.%s\n    match: {domain: %s, descriptor: [{key: bench_rule, value: %s}, {key: apikey}]}\n    algorithm: token_bucket\n    rate: %d\n    period: %s\n    burst: %d\n    fail_mode: closed\n",
			r.ID, RLSDomain, r.ID, r.Rate, r.Period, r.Burst)
		if s.Timeout > 0 {
			fmt.Fprintf(&b, "    timeout: %s\n", s.Timeout)
		}
	}
	return b.String()
}

// RLSFactory returns a Factory of gateways that ask the nodes' Envoy rate
// limit service (ShouldRateLimit), as Envoy does: one RPC per check, one
// descriptor per rule. Like a gateway behind a load balancer, each gateway
// spreads its RPCs over every node in turn.
func RLSFactory(addrs []string) Factory {
	return func(i int) (Target, error) {
		if len(addrs) == 0 {
			return nil, fmt.Errorf("%w: no gRPC addresses", ErrInput)
		}
		g := &rlsGateway{}
		for j := range addrs {
			cc, err := grpc.NewClient(addrs[(i+j)%len(addrs)], grpc.WithTransportCredentials(insecure.NewCredentials()),
				// A fixed window, as Envoy's HTTP/2 client has: grpc-go's
				// window estimator pings after every answer it reads.
				grpc.WithInitialWindowSize(grpcwin.Window), grpc.WithInitialConnWindowSize(grpcwin.Window))
			if err != nil {
				_ = g.Close()
				return nil, err
			}
			g.conns = append(g.conns, cc)
			g.clients = append(g.clients, rlsv3.NewRateLimitServiceClient(cc))
		}
		return g, nil
	}
}

type rlsGateway struct {
	conns   []*grpc.ClientConn
	clients []rlsv3.RateLimitServiceClient
	next    atomic.Uint64
}

var (
	_ Target       = (*rlsGateway)(nil)
	_ GroupChecker = (*rlsGateway)(nil)
)

func (g *rlsGateway) Check(ctx context.Context, key, rule string, cost int64) (bool, error) {
	return g.CheckGroup(ctx, key, []string{rule}, cost)
}

// CheckGroup sends one descriptor per rule in one request (the node makes
// them all-or-nothing by default).
func (g *rlsGateway) CheckGroup(ctx context.Context, key string, rules []string, cost int64) (bool, error) {
	req := &rlsv3.RateLimitRequest{Domain: RLSDomain}
	for _, r := range rules {
		req.Descriptors = append(req.Descriptors, &rlv3.RateLimitDescriptor{
			Entries:    []*rlv3.RateLimitDescriptor_Entry{{Key: "bench_rule", Value: r}, {Key: "apikey", Value: key}},
			HitsAddend: wrapperspb.UInt64(uint64(cost)),
		})
	}
	cl := g.clients[g.next.Add(1)%uint64(len(g.clients))]
	resp, err := cl.ShouldRateLimit(ctx, req)
	if err != nil {
		return false, fmt.Errorf("bench: rls: %w", err)
	}
	for _, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() == nil {
			return false, fmt.Errorf("%w: rls: a descriptor matched no rule", ErrUndecided)
		}
	}
	return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, nil
}

// Close closes the gateway's connections.
func (g *rlsGateway) Close() error {
	var first error
	for _, cc := range g.conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
