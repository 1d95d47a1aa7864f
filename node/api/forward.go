package api

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/authz"
	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
	"github.com/weirlimit/weir/rulesraft/rules/rulespb"
)

// A follower reaches the leader's Rules service over gRPC: the one wire a
// write crosses on its way from a follower, and the one a read-your-writes
// read asks the leader's read index over (core.go, catchUp). The caller's Authorization goes
// along (the leader checks it too), and the request is marked forwarded so
// it is never forwarded a second time.

// Metadata keys.
const (
	mdAuthorization = "authorization"
	// mdForwarded marks a request a follower forwarded to the leader, so it
	// is never forwarded a second time.
	mdForwarded = "weir-forwarded"
)

// grpcCaller reads the caller of a gRPC request from its metadata and peer.
func grpcCaller(ctx context.Context) caller {
	md, _ := metadata.FromIncomingContext(ctx)
	c := caller{auth: md.Get(mdAuthorization), forwarded: len(md.Get(mdForwarded)) > 0, author: "unknown", writer: authz.FromContext(ctx).Writer()}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.author = "grpc:" + p.Addr.String()
	}
	return c
}

// forward sends cmd to the leader as the Rules request that makes it, and
// returns the leader's answer (its errors keep their status, see fromGRPC).
func (s *Server) forward(ctx context.Context, c caller, cmd rulesraft.Command) (written, error) {
	rc, fctx, err := s.leaderClient(ctx, c)
	if err != nil {
		return written{}, err
	}
	var resp *weirv1.WriteResponse
	switch cmd.Op {
	case rulesraft.OpApply:
		resp, err = rc.ApplyRules(fctx, &weirv1.ApplyRulesRequest{Rules: rulesToProto(cmd.Rules), ReplaceAll: cmd.ReplaceAll, Author: cmd.Author})
	case rulesraft.OpDeleteRule:
		resp, err = rc.DeleteRule(fctx, &weirv1.DeleteRuleRequest{Id: cmd.ID, Author: cmd.Author})
	case rulesraft.OpRollback:
		resp, err = rc.Rollback(fctx, &weirv1.RollbackRequest{Version: cmd.Version, Author: cmd.Author})
	case rulesraft.OpSetOverride:
		resp, err = rc.SetOverride(fctx, &weirv1.SetOverrideRequest{Override: rulespb.OverrideToProto(*cmd.Override), Author: cmd.Author})
	case rulesraft.OpDeleteOverride:
		resp, err = rc.DeleteOverride(fctx, &weirv1.DeleteOverrideRequest{Key: cmd.Key, Rule: cmd.Rule, Author: cmd.Author})
	default:
		return written{}, fmt.Errorf("api: no Rules request makes op %q", cmd.Op)
	}
	if err != nil {
		return written{}, fromGRPC(err)
	}
	return written{version: resp.GetVersion(), diff: resp.GetDiff()}, nil
}

func rulesToProto(rs []rules.Rule) []*weirv1.Rule {
	out := make([]*weirv1.Rule, len(rs))
	for i, r := range rs {
		out[i] = rulespb.RuleToProto(r)
	}
	return out
}

// leaderClient returns a Rules client for the leader and the outgoing
// context to call it with (authorization passed through, marked forwarded).
func (s *Server) leaderClient(ctx context.Context, c caller) (weirv1.RulesClient, context.Context, error) {
	if c.forwarded {
		return nil, nil, limit.Errorf(limit.ErrNotLeader, "this node is not the Raft leader (the request was already forwarded once; leadership is changing, retry shortly)")
	}
	addr, ok := s.b.LeaderGRPC()
	if !ok || addr == "" {
		return nil, nil, limit.Errorf(limit.ErrNotLeader, "this node is not the Raft leader and no leader is known yet; retry shortly")
	}
	conn, err := s.conn(addr)
	if err != nil {
		return nil, nil, err
	}
	out := metadata.Pairs(mdForwarded, "1")
	for _, v := range c.auth {
		out.Append(mdAuthorization, v)
	}
	return weirv1.NewRulesClient(conn), metadata.NewOutgoingContext(ctx, out), nil
}

// conn returns the cached connection to addr, dialing it on first use.
func (s *Server) conn(addr string) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, limit.Errorf(limit.ErrUnavailable, "node is shutting down")
	}
	if c, ok := s.conns[addr]; ok {
		return c, nil
	}
	opts := s.cfg.DialOptions
	if opts == nil {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, limit.Errorf(limit.ErrUnavailable, "cannot reach the leader at %s: %v", addr, err)
	}
	s.conns[addr] = c
	return c, nil
}
