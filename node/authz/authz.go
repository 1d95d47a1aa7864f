package authz

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/httpjson"
	"github.com/weirlimit/weir/internal/tlsconf"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// Config is the node's security configuration.
type Config struct {
	// TLS: callers connect with mutual TLS, so each has a verified
	// certificate naming its role.
	TLS bool
	// AdminToken, when set, grants the admin role to a caller that sends
	// it as "Authorization: Bearer <token>".
	AdminToken string
	// GatewayToken, when set, grants the gateway role to a caller that
	// sends it as "Authorization: Bearer <token>".
	GatewayToken string
	// ReadToken, when set, grants the reader role to a caller that sends
	// it as "Authorization: Bearer <token>".
	ReadToken string
	// ReadProof, when set, checks the ReadProofHeader of an HTTP request:
	// ok grants the reader role (a node reading another member's part
	// without TLS, with its gossip key's proof).
	ReadProof func(proof string) bool
	// NodeProof, when set, is asked for callers without a node
	// certificate: ok grants the node role (nodeID names the node).
	NodeProof func(ctx context.Context) (nodeID string, ok bool)
	// Logger receives refusals; nil discards.
	Logger *slog.Logger
}

// Caller is who sent a request and what it may do.
type Caller struct {
	// Identity is the certificate's identity (zero without one).
	Identity tlsconf.Identity
	HasCert  bool
	// Node is set when the caller is a node (certificate or NodeProof);
	// NodeID names it.
	Node   bool
	NodeID string
	// Admin: an admin certificate or the admin token.
	Admin bool
	// Gateway: a gateway certificate or the gateway token.
	Gateway bool
	// GatewayToken: the gateway role came from the gateway token.
	GatewayToken bool
	// Remote is the connection's peer address.
	Remote string
	// gatewayCreds: the node has gateway credentials (TLS or a gateway
	// token), so acting as a gateway needs the role (GatewayOwnerOf).
	gatewayCreds bool
	// Reader: the read token or a node's read proof.
	Reader bool
	// KeysHidden: reads of keys are guarded and the caller may not see
	// them: an endpoint that redacts instead of refusing (/metrics)
	// redacts.
	KeysHidden bool
}

// ReadProofHeader is the HTTP header of Config.ReadProof.
const ReadProofHeader = "Weir-Node-Proof"

// Any reports whether the caller holds any role.
func (c Caller) Any() bool { return c.Node || c.Admin || c.Gateway || c.Reader }

// Reads reports whether the caller may see keys (events, hot keys, the
// ops snapshot, a key's limits): a node, an admin or a reader.
func (c Caller) Reads() bool { return c.Node || c.Admin || c.Reader }

// Writer reports whether the caller may write rules and overrides.
func (c Caller) Writer() bool { return c.Node || c.Admin }

// String names the caller in log lines.
func (c Caller) String() string {
	switch {
	case c.HasCert:
		return c.Identity.String()
	case c.Node:
		return "node " + c.NodeID + " (proof)"
	case c.Admin:
		return "admin token"
	case c.GatewayToken:
		return "gateway token"
	case c.Reader:
		return "reader"
	}
	return "anonymous"
}

type ctxKey struct{}

// FromContext is the caller an interceptor or the middleware stored in
// ctx (zero when the request did not pass through them).
func FromContext(ctx context.Context) Caller {
	c, _ := ctx.Value(ctxKey{}).(Caller)
	return c
}

// Authorizer applies the policy.
type Authorizer struct {
	cfg Config
	log *slog.Logger
}

// New returns an Authorizer for cfg.
func New(cfg Config) *Authorizer {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Authorizer{cfg: cfg, log: log}
}

// nodesOnly: Peer and refunds are limited to nodes.
func (a *Authorizer) nodesOnly() bool { return a.cfg.TLS || a.cfg.NodeProof != nil }

// guarded: writes need admin, and reads of rules need a role.
func (a *Authorizer) guarded() bool { return a.cfg.TLS || a.cfg.AdminToken != "" }

// readsGuarded: reads that show keys need a reader (Caller.Reads).
func (a *Authorizer) readsGuarded() bool {
	return a.cfg.TLS || a.cfg.AdminToken != "" || a.cfg.ReadToken != ""
}

// caller combines the certificate, the node proof and the tokens.
func (a *Authorizer) caller(ctx context.Context, id tlsconf.Identity, hasCert bool, auth []string) Caller {
	c := Caller{Identity: id, HasCert: hasCert}
	if hasCert {
		switch id.Role {
		case tlsconf.RoleNode:
			c.Node, c.NodeID = true, id.Name
		case tlsconf.RoleAdmin:
			c.Admin = true
		case tlsconf.RoleGateway:
			c.Gateway = true
		}
	}
	if !c.Node && a.cfg.NodeProof != nil {
		if nid, ok := a.cfg.NodeProof(ctx); ok {
			c.Node, c.NodeID = true, nid
		}
	}
	c.gatewayCreds = a.gatewayCreds()
	if !c.Gateway && Bearer(auth, a.cfg.GatewayToken) {
		c.Gateway, c.GatewayToken = true, true
	}
	if !c.Admin && Bearer(auth, a.cfg.AdminToken) {
		c.Admin = true
	}
	if !c.Reads() && Bearer(auth, a.cfg.ReadToken) {
		c.Reader = true
	}
	c.KeysHidden = a.readsGuarded() && !c.Reads()
	return c
}

// Bearer reports whether auth (the Authorization values of a request)
// holds "Bearer <token>" (token not empty), compared in constant time: the
// one token check of every edge.
func Bearer(auth []string, token string) bool {
	if token == "" {
		return false
	}
	for _, v := range auth {
		tok, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(token)) == 1 {
			return true
		}
	}
	return false
}

// class is what an endpoint needs.
type class int

const (
	open     class = iota // any caller (any role under TLS)
	peerOnly              // nodes only
	write                 // admin or node
	read                  // any role or the token
	checks                // like open, and refunds need a node
	probe                 // HTTP /healthz and /readyz: anyone, even without a certificate
	reports               // gateway reports: the gateway role once the node has gateway credentials
	keyring               // HTTP /v1/keyring...: under TLS admin or node; the handler admits admins and key-proven members only
	keys                  // events, hot keys, the ops snapshot: a reader (Caller.Reads)
	limits                // a key's limits: a reader, or a gateway certificate
)

func grpcClass(method string) class {
	switch {
	case strings.HasPrefix(method, "/weir.v1.Peer/"), strings.HasPrefix(method, "/weir.v1.Region/"):
		return peerOnly
	case method == weirv1.Limiter_Check_FullMethodName, method == weirv1.Limiter_CheckStream_FullMethodName,
		method == weirv1.Limiter_Release_FullMethodName:
		return checks
	case method == weirv1.Ops_Report_FullMethodName:
		return reports
	case method == weirv1.Ops_Events_FullMethodName, method == weirv1.Ops_HotKeys_FullMethodName:
		return keys
	}
	switch method {
	case weirv1.Rules_ApplyRules_FullMethodName, weirv1.Rules_DeleteRule_FullMethodName,
		weirv1.Rules_Rollback_FullMethodName, weirv1.Rules_SetOverride_FullMethodName,
		weirv1.Rules_DeleteOverride_FullMethodName:
		return write
	case weirv1.Rules_ListRules_FullMethodName, weirv1.Rules_GetRule_FullMethodName,
		weirv1.Rules_History_FullMethodName:
		return read
	}
	return open
}

// decide reports nil when c may call an endpoint of class cl.
func (a *Authorizer) decide(c Caller, cl class) error {
	if cl == probe {
		return nil
	}
	if a.cfg.TLS && !c.Node && !c.Admin && !c.Gateway { // the read token alone does not open TLS
		// Unreachable through a TLS listener (every verified certificate
		// names a role), but never open by mistake.
		return status.Error(codes.Unauthenticated, "authz: a client certificate from the cluster CA is required")
	}
	switch cl {
	case peerOnly:
		if a.nodesOnly() && !c.Node {
			return status.Errorf(codes.PermissionDenied, "authz: only nodes may call the Peer service (caller: %s)", c)
		}
	case write:
		if a.guarded() && !c.Writer() {
			if !c.Any() {
				return status.Error(codes.Unauthenticated, "authz: rule and override writes need the admin role: an admin certificate, or \"Authorization: Bearer <token>\" with the node's admin token")
			}
			return status.Errorf(codes.PermissionDenied, "authz: rule and override writes need the admin role (caller: %s)", c)
		}
	case reports:
		if _, err := GatewayOwnerOf(c); err != nil {
			return err
		}
	case keyring:
		// Without TLS the handler decides: a member's call carries a key
		// proof bound to the request, which only it can check.
		if a.cfg.TLS && !c.Writer() {
			return status.Errorf(codes.PermissionDenied, "authz: the gossip keyring needs the admin role: an admin certificate or the admin token (caller: %s)", c)
		}
	case read:
		if a.guarded() && !c.Any() {
			return status.Error(codes.Unauthenticated, "authz: reading rules, overrides and history needs a role: a gateway, admin or node certificate, or the admin token")
		}
	case keys, limits:
		if !a.readsGuarded() || c.Reads() || (cl == limits && c.Gateway) {
			return nil
		}
		const what = "authz: events, hot keys, the ops snapshot and a key's limits show keys: they need the read role: \"Authorization: Bearer <token>\" with the read token (--read-token-file) or the admin token, or an admin or node certificate"
		if !c.Any() {
			return status.Error(codes.Unauthenticated, what)
		}
		return status.Errorf(codes.PermissionDenied, "%s (caller: %s)", what, c)
	}
	return nil
}

func (a *Authorizer) refused(err error, what, remote string, c Caller) error {
	a.log.Warn("authz: refused", "call", what, "caller", c.String(), "remote", remote, "err", status.Convert(err).Message())
	return err
}

func errRefund(c Caller) error {
	return status.Errorf(codes.PermissionDenied, "authz: refund items may only come from nodes (caller: %s)", c)
}

func hasRefund(items []*weirv1.CheckItem) bool {
	for _, it := range items {
		if it.GetRefund() {
			return true
		}
	}
	return false
}

func (a *Authorizer) grpcCaller(ctx context.Context) (Caller, string) {
	id, hasCert := tlsconf.FromContext(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	remote := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	c := a.caller(ctx, id, hasCert, md.Get("authorization"))
	c.Remote = remote
	return c, remote
}

// UnaryInterceptor applies the policy to unary calls.
func (a *Authorizer) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		c, remote := a.grpcCaller(ctx)
		cl := grpcClass(info.FullMethod)
		if err := a.decide(c, cl); err != nil {
			return nil, a.refused(err, info.FullMethod, remote, c)
		}
		if cl == checks && a.nodesOnly() && !c.Node {
			if r, ok := req.(*weirv1.CheckRequest); ok && hasRefund(r.GetItems()) {
				return nil, a.refused(errRefund(c), info.FullMethod, remote, c)
			}
		}
		return h(context.WithValue(ctx, ctxKey{}, c), req)
	}
}

// StreamInterceptor applies the policy to streams; on CheckStream, every
// request is looked at for refund items.
func (a *Authorizer) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx := ss.Context()
		c, remote := a.grpcCaller(ctx)
		cl := grpcClass(info.FullMethod)
		if err := a.decide(c, cl); err != nil {
			return a.refused(err, info.FullMethod, remote, c)
		}
		w := &stream{ServerStream: ss, ctx: context.WithValue(ctx, ctxKey{}, c)}
		if cl == checks && a.nodesOnly() && !c.Node {
			w.check = func(m any) error {
				if r, ok := m.(*weirv1.CheckStreamRequest); ok && hasRefund(r.GetItems()) {
					return a.refused(errRefund(c), info.FullMethod, remote, c)
				}
				return nil
			}
		}
		return h(srv, w)
	}
}

type stream struct {
	grpc.ServerStream
	ctx   context.Context
	check func(m any) error
}

func (s *stream) Context() context.Context { return s.ctx }

func (s *stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.check != nil {
		return s.check(m)
	}
	return nil
}

// httpClass is what an HTTP request needs.
func httpClass(r *http.Request) class {
	p := r.URL.Path
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	if (p == "/healthz" || p == "/readyz") && get {
		return probe
	}
	switch {
	case p == "/v1/gateways/report":
		return reports
	case p == "/v1/keyring" || strings.HasPrefix(p, "/v1/keyring/"):
		return keyring
	case p == "/v1/events" || p == "/v1/hotkeys" || p == "/v1/ops/snapshot":
		return keys
	case get && strings.HasPrefix(p, "/v1/limits/"):
		return limits
	}
	rules := p == "/v1/rules" || strings.HasPrefix(p, "/v1/rules/") || strings.HasPrefix(p, "/v1/rules:")
	overrides := p == "/v1/overrides"
	if !rules && !overrides {
		return open
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return read
	}
	return write
}

// Middleware applies the policy to the HTTP API before a handler reads
// the body, and stores the caller in the request's context.
func (a *Authorizer) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var (
			id      tlsconf.Identity
			hasCert bool
		)
		if r.TLS != nil {
			id, hasCert = tlsconf.FromPeerCerts(r.TLS.PeerCertificates)
		}
		c := a.caller(r.Context(), id, hasCert, r.Header.Values("Authorization"))
		c.Remote = r.RemoteAddr
		if !c.Reads() && a.cfg.ReadProof != nil {
			if p := r.Header.Get(ReadProofHeader); p != "" && a.cfg.ReadProof(p) {
				c.Reader, c.KeysHidden = true, false
			}
		}
		if err := a.decide(c, httpClass(r)); err != nil {
			_ = a.refused(err, r.Method+" "+r.URL.Path, r.RemoteAddr, c)
			st := status.Convert(err)
			code, name := http.StatusForbidden, "forbidden"
			if st.Code() == codes.Unauthenticated {
				code, name = http.StatusUnauthorized, "unauthorized"
			}
			httpjson.WriteError(w, code, name, st.Message())
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, c)))
	})
}
