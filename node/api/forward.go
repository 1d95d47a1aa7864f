package api

import (
	"context"
	"crypto/subtle"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/proto/weirv1"
)

// Metadata keys.
const (
	mdAuthorization = "authorization"
	// mdForwarded marks a request a follower forwarded to the leader, so it
	// is never forwarded a second time.
	mdForwarded = "weir-forwarded"
)

// authorize checks the admin token in ctx's incoming metadata.
func (s *Server) authorize(ctx context.Context) error {
	if s.cfg.AdminToken == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(mdAuthorization) {
		tok, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.cfg.AdminToken)) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "this node requires an admin token for writes: send \"Authorization: Bearer <token>\" with the token the node was started with")
}

// authorFrom names the caller for history when the request names nobody.
func authorFrom(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return "grpc:" + p.Addr.String()
	}
	return "unknown"
}

// leaderClient returns a Rules client for the leader and the outgoing
// context to call it with (authorization passed through, marked forwarded).
func (s *Server) leaderClient(ctx context.Context) (weirv1.RulesClient, context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(mdForwarded)) > 0 {
		return nil, nil, status.Error(codes.FailedPrecondition, "this node is not the Raft leader (the request was already forwarded once; leadership is changing, retry shortly)")
	}
	addr, ok := s.b.LeaderGRPC()
	if !ok || addr == "" {
		return nil, nil, status.Error(codes.FailedPrecondition, "this node is not the Raft leader and no leader is known yet; retry shortly")
	}
	conn, err := s.conn(addr)
	if err != nil {
		return nil, nil, err
	}
	out := metadata.Pairs(mdForwarded, "1")
	for _, v := range md.Get(mdAuthorization) {
		out.Append(mdAuthorization, v)
	}
	return weirv1.NewRulesClient(conn), metadata.NewOutgoingContext(ctx, out), nil
}

// conn returns the cached connection to addr, dialing it on first use.
func (s *Server) conn(addr string) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, status.Error(codes.Unavailable, "node is shutting down")
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
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("cannot reach the leader at %s: %v", addr, err))
	}
	s.conns[addr] = c
	return c, nil
}
