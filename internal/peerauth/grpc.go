package peerauth

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// MetadataKey is the gRPC metadata entry (and, as a header, the HTTP one)
// carrying a node's Token.
const MetadataKey = "weir-node-proof"

// Credentials are per-RPC credentials that attach a fresh Token for node
// id to every call (and to every stream when it opens).
func (a *Authenticator) Credentials(id string) credentials.PerRPCCredentials {
	return perRPC{a: a, id: id}
}

type perRPC struct {
	a  *Authenticator
	id string
}

func (p perRPC) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{MetadataKey: p.a.Token(p.id)}, nil
}

// RequireTransportSecurity is false: the proof also serves clusters
// without TLS (it authenticates, it does not encrypt).
func (perRPC) RequireTransportSecurity() bool { return false }

// Verify is a Verifier: it checks the Token in ctx's incoming metadata.
func (a *Authenticator) Verify(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(MetadataKey)
	if len(v) != 1 {
		return "", false
	}
	return a.VerifyToken(v[0])
}

// LoopbackOnly is the Verifier of a node with neither TLS nor a gossip key:
// any caller on a loopback address passes (as node "loopback"), no other.
func LoopbackOnly(ctx context.Context) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", false
	}
	if IsLoopback(p.Addr) {
		return "loopback", true
	}
	return "", false
}

// IsLoopback reports whether addr is a loopback IP address.
func IsLoopback(addr net.Addr) bool {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return false
	}
	return ap.Addr().Unmap().IsLoopback()
}

// Guard returns the server interceptors that refuse, with Unauthenticated,
// any call to a method under prefix (such as "/weir.v1.Peer/") that verify
// does not pass, calling refused (if not nil; it must not block) first.
// Other methods pass untouched.
func Guard(prefix string, verify Verifier, refused func(ctx context.Context, method string)) []grpc.ServerOption {
	check := func(ctx context.Context, method string) error {
		if !strings.HasPrefix(method, prefix) {
			return nil
		}
		if _, ok := verify(ctx); !ok {
			if refused != nil {
				refused(ctx, method)
			}
			return status.Error(codes.Unauthenticated, "peerauth: "+method+" is for nodes of this cluster; the call carries no valid node proof")
		}
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}
