package authz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/tlsconf"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

func cert(role tlsconf.Role, name string) []*x509.Certificate {
	id := tlsconf.Identity{Cluster: "weir", Role: role, Name: name}
	return []*x509.Certificate{{URIs: []*url.URL{id.URL()}}}
}

// TestHTTPPolicy walks the policy table through the middleware.
func TestHTTPPolicy(t *testing.T) {
	type req struct {
		method, path string
		certs        []*x509.Certificate
		auth         string
	}
	tlsOn := New(Config{TLS: true, AdminToken: "tok"})
	tokenOnly := New(Config{AdminToken: "tok"})
	off := New(Config{})
	gw, adm, nd := cert(tlsconf.RoleGateway, "g"), cert(tlsconf.RoleAdmin, "a"), cert(tlsconf.RoleNode, "n1")
	for _, tc := range []struct {
		a    *Authorizer
		r    req
		want int
	}{
		{tlsOn, req{"POST", "/v1/limits/check", gw, ""}, 200},
		{tlsOn, req{"GET", "/v1/rules", gw, ""}, 200},
		{tlsOn, req{"GET", "/v1/overrides", gw, ""}, 200},
		{tlsOn, req{"PUT", "/v1/rules/x", gw, ""}, 403},
		{tlsOn, req{"POST", "/v1/rules:apply", gw, ""}, 403},
		{tlsOn, req{"DELETE", "/v1/overrides", gw, ""}, 403},
		{tlsOn, req{"PUT", "/v1/rules/x", gw, "Bearer tok"}, 200},
		{tlsOn, req{"PUT", "/v1/rules/x", gw, "Bearer nope"}, 403},
		{tlsOn, req{"PUT", "/v1/rules/x", adm, ""}, 200},
		{tlsOn, req{"PUT", "/v1/rules/x", nd, ""}, 200},
		{tlsOn, req{"GET", "/metrics", nil, ""}, 401},
		{tlsOn, req{"GET", "/healthz", nil, ""}, 200},
		{tlsOn, req{"GET", "/readyz", nil, ""}, 200},
		{tlsOn, req{"POST", "/healthz", nil, ""}, 401},
		{tokenOnly, req{"GET", "/v1/rules", nil, ""}, 401},
		{tokenOnly, req{"GET", "/v1/rules/history", nil, "Bearer tok"}, 200},
		{tokenOnly, req{"GET", "/v1/overrides", nil, "Bearer no"}, 401},
		{tokenOnly, req{"POST", "/v1/limits/check", nil, ""}, 200},
		{tokenOnly, req{"PUT", "/v1/rules/x", nil, ""}, 401},
		{off, req{"PUT", "/v1/rules/x", nil, ""}, 200},
		{off, req{"GET", "/v1/overrides", nil, ""}, 200},
	} {
		r := httptest.NewRequest(tc.r.method, tc.r.path, nil)
		if tc.r.certs != nil {
			r.TLS = &tls.ConnectionState{PeerCertificates: tc.r.certs}
		}
		if tc.r.auth != "" {
			r.Header.Set("Authorization", tc.r.auth)
		}
		w := httptest.NewRecorder()
		var seen Caller
		tc.a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = FromContext(r.Context()) })).ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%+v %s %s: %d, want %d (%s)", tc.a.cfg, tc.r.method, tc.r.path, w.Code, tc.want, w.Body)
		}
		if w.Code == 200 && tc.r.certs != nil && !seen.HasCert {
			t.Errorf("%s %s: handler saw no caller", tc.r.method, tc.r.path)
		}
	}
}

// TestNodeProof: without TLS, the NodeProof hook alone grants the node
// role: Peer and refunds need it; nothing else changes.
func TestNodeProof(t *testing.T) {
	a := New(Config{NodeProof: func(ctx context.Context) (string, bool) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-proof"); len(v) == 1 && v[0] == "ok" {
			return "n2", true
		}
		return "", false
	}})
	call := func(method string, req any, proof bool) (Caller, error) {
		ctx := context.Background()
		if proof {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-proof", "ok"))
		}
		var seen Caller
		_, err := a.UnaryInterceptor()(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, _ any) (any, error) {
			seen = FromContext(ctx)
			return nil, nil
		})
		return seen, err
	}
	refund := &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "k", Rule: "r", Cost: 1, Refund: true}}}
	for _, tc := range []struct {
		method string
		req    any
		proof  bool
		want   codes.Code
	}{
		{weirv1.Peer_Handoff_FullMethodName, &weirv1.HandoffRequest{}, false, codes.PermissionDenied},
		{weirv1.Peer_Handoff_FullMethodName, &weirv1.HandoffRequest{}, true, codes.OK},
		{weirv1.Peer_Replicate_FullMethodName, &weirv1.ReplicateRequest{}, false, codes.PermissionDenied},
		{weirv1.Limiter_Check_FullMethodName, refund, false, codes.PermissionDenied},
		{weirv1.Limiter_Check_FullMethodName, refund, true, codes.OK},
		{weirv1.Limiter_Check_FullMethodName, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "k", Rule: "r", Cost: 1}}}, false, codes.OK},
		{weirv1.Rules_ListRules_FullMethodName, &weirv1.ListRulesRequest{}, false, codes.OK},
		{weirv1.Rules_DeleteRule_FullMethodName, &weirv1.DeleteRuleRequest{}, false, codes.OK}, // no token, no TLS: open as before
	} {
		c, err := call(tc.method, tc.req, tc.proof)
		if status.Code(err) != tc.want {
			t.Errorf("%s proof=%v: %v, want %v", tc.method, tc.proof, err, tc.want)
		}
		if err == nil && tc.proof && (!c.Node || c.NodeID != "n2") {
			t.Errorf("%s: caller %+v, want node n2", tc.method, c)
		}
	}
}

// TestReadPolicy: reads that show keys need the read role once TLS or a
// token is set; /metrics stays open but marks the caller KeysHidden.
func TestReadPolicy(t *testing.T) {
	type req struct {
		method, path string
		certs        []*x509.Certificate
		auth, proof  string
	}
	proof := func(p string) bool { return p == "good" }
	tlsOn := New(Config{TLS: true})
	tokens := New(Config{AdminToken: "adm", ReadToken: "rd", ReadProof: proof})
	readOnly := New(Config{ReadToken: "rd"})
	off := New(Config{})
	gw, adm, nd := cert(tlsconf.RoleGateway, "g"), cert(tlsconf.RoleAdmin, "a"), cert(tlsconf.RoleNode, "n1")
	for _, tc := range []struct {
		a      *Authorizer
		r      req
		want   int
		hidden bool
	}{
		{tokens, req{"GET", "/v1/events", nil, "", ""}, 401, false},
		{tokens, req{"GET", "/v1/events", nil, "Bearer wrong", ""}, 401, false},
		{tokens, req{"GET", "/v1/events", nil, "Bearer rd", ""}, 200, false},
		{tokens, req{"GET", "/v1/events", nil, "Bearer adm", ""}, 200, false},
		{tokens, req{"GET", "/v1/hotkeys", nil, "", ""}, 401, false},
		{tokens, req{"GET", "/v1/ops/snapshot", nil, "", ""}, 401, false},
		{tokens, req{"GET", "/v1/ops/snapshot", nil, "", "good"}, 200, false},
		{tokens, req{"GET", "/v1/ops/snapshot", nil, "", "bad"}, 401, false},
		{tokens, req{"GET", "/v1/limits/apikey:a", nil, "", ""}, 401, false},
		{tokens, req{"GET", "/v1/limits/apikey:a", nil, "Bearer rd", ""}, 200, false},
		{tokens, req{"GET", "/v1/rules", nil, "Bearer rd", ""}, 200, false},
		{tokens, req{"PUT", "/v1/rules/x", nil, "Bearer rd", ""}, 403, false},
		{tokens, req{"PUT", "/v1/rules/x", nil, "", "good"}, 403, false}, // a read proof never writes
		{tokens, req{"GET", "/metrics", nil, "", ""}, 200, true},
		{tokens, req{"GET", "/metrics", nil, "Bearer rd", ""}, 200, false},
		{tokens, req{"POST", "/v1/limits/check", nil, "", ""}, 200, true},
		{readOnly, req{"GET", "/v1/events", nil, "", ""}, 401, false},
		{readOnly, req{"GET", "/v1/events", nil, "Bearer rd", ""}, 200, false},
		{tlsOn, req{"GET", "/v1/events", gw, "", ""}, 403, false},
		{tlsOn, req{"GET", "/v1/events", adm, "", ""}, 200, false},
		{tlsOn, req{"GET", "/v1/hotkeys", nd, "", ""}, 200, false},
		{tlsOn, req{"GET", "/v1/ops/snapshot", gw, "", ""}, 403, false},
		{tlsOn, req{"GET", "/v1/limits/apikey:a", gw, "", ""}, 200, true},
		{tlsOn, req{"GET", "/metrics", gw, "", ""}, 200, true},
		{tlsOn, req{"GET", "/metrics", adm, "", ""}, 200, false},
		{off, req{"GET", "/v1/events", nil, "", ""}, 200, false},
		{off, req{"GET", "/metrics", nil, "", ""}, 200, false},
	} {
		r := httptest.NewRequest(tc.r.method, tc.r.path, nil)
		if tc.r.certs != nil {
			r.TLS = &tls.ConnectionState{PeerCertificates: tc.r.certs}
		}
		if tc.r.auth != "" {
			r.Header.Set("Authorization", tc.r.auth)
		}
		if tc.r.proof != "" {
			r.Header.Set(ReadProofHeader, tc.r.proof)
		}
		w := httptest.NewRecorder()
		var seen Caller
		tc.a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = FromContext(r.Context()) })).ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%+v %s %s %q: %d, want %d (%s)", tc.a.cfg, tc.r.method, tc.r.path, tc.r.auth, w.Code, tc.want, w.Body)
		}
		if w.Code == 200 && seen.KeysHidden != tc.hidden {
			t.Errorf("%s %s %q: KeysHidden %v, want %v", tc.r.method, tc.r.path, tc.r.auth, seen.KeysHidden, tc.hidden)
		}
	}
	// gRPC Ops reads: the same rule.
	for _, tc := range []struct {
		auth string
		want codes.Code
	}{{"", codes.Unauthenticated}, {"Bearer rd", codes.OK}, {"Bearer adm", codes.OK}} {
		ctx := context.Background()
		if tc.auth != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", tc.auth))
		}
		_, err := tokens.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: weirv1.Ops_HotKeys_FullMethodName},
			func(context.Context, any) (any, error) { return nil, nil })
		if status.Code(err) != tc.want {
			t.Errorf("Ops.HotKeys %q: %v, want %v", tc.auth, err, tc.want)
		}
	}
}
