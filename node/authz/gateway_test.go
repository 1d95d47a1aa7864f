package authz

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/weirlimit/weir/internal/tlsconf"
)

// TestGatewayOwner: who may act as a gateway (reports, Rules.Watch with a
// gateway id) and what its ids are bound to, in each mode.
func TestGatewayOwner(t *testing.T) {
	tlsOn := New(Config{TLS: true})
	tokens := New(Config{AdminToken: "adm", GatewayToken: "gw"})
	adminOnly := New(Config{AdminToken: "adm"})
	gw, adm := tlsconf.Identity{Cluster: "weir", Role: tlsconf.RoleGateway, Name: "g"}, tlsconf.Identity{Cluster: "weir", Role: tlsconf.RoleAdmin, Name: "a"}
	for _, tc := range []struct {
		name    string
		a       *Authorizer
		id      tlsconf.Identity
		hasCert bool
		auth    string
		owner   string // "" refused
		max     int
	}{
		{"gateway certificate", tlsOn, gw, true, "", "cert:" + gw.String(), MaxGatewayIDsPerCredential},
		{"admin certificate", tlsOn, adm, true, "", "", 0},
		{"gateway token", tokens, tlsconf.Identity{}, false, "Bearer gw", "token", MaxGatewayIDsPerCredential},
		{"admin token, gateway token set", tokens, tlsconf.Identity{}, false, "Bearer adm", "", 0},
		{"nothing, gateway token set", tokens, tlsconf.Identity{}, false, "", "", 0},
		{"admin token only: the connection", adminOnly, tlsconf.Identity{}, false, "", "conn:10.0.0.1:5000", MaxGatewayIDsPerConn},
	} {
		c := tc.a.caller(context.Background(), tc.id, tc.hasCert, []string{tc.auth})
		c.Remote = "10.0.0.1:5000"
		o, err := GatewayOwnerOf(c)
		if tc.owner == "" {
			if err == nil {
				t.Errorf("%s: owner %+v, want refused", tc.name, o)
			}
			continue
		}
		if err != nil || o.Name != tc.owner || o.MaxIDs != tc.max {
			t.Errorf("%s: %+v, %v; want %s with %d ids", tc.name, o, err, tc.owner, tc.max)
		}
	}
	// Without any interceptor (an open node) a request is bound to its
	// connection.
	if o, err := GatewayOwnerFrom(context.Background(), "10.0.0.2:7"); err != nil || o.Name != "conn:10.0.0.2:7" || !o.Conn {
		t.Errorf("open node: %+v, %v", o, err)
	}
	// The middleware refuses a report before its body is read.
	h := tokens.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	for auth, want := range map[string]int{"": 401, "Bearer adm": 403, "Bearer gw": 200} {
		r := httptest.NewRequest("POST", "/v1/gateways/report", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("report with %q: %d, want %d", auth, w.Code, want)
		}
	}
}
