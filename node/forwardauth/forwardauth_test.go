package forwardauth_test

import (
	"net/http"
	"testing"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/node/forwardauth"
)

const faRules = `rules:
  - id: orders
    match: {route: /v1/orders, method: GET}
    key: apikey
    rate: 3
    period: 1h
  - id: per-ip
    match: {route: /v1/ip/*}
    key: ip
    rate: 2
    period: 1h
  - id: shadowed
    match: {route: /v1/shadow}
    key: global
    rate: 1
    period: 1h
    shadow: true
`

func ask(t *testing.T, addr, query string, h map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+forwardauth.Path+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func TestForwardAuthCluster(t *testing.T) {
	c := testcluster.New(t, 3)
	c.ApplyRules(faRules)
	addrs := []string{c.Nodes[0].HTTPAddr(), c.Nodes[1].HTTPAddr(), c.Nodes[2].HTTPAddr()}

	t.Run("nginx style headers: 200 then 429 across nodes", func(t *testing.T) {
		h := map[string]string{"X-Original-URI": "/v1/orders?page=2", "X-Original-Method": "GET", "X-API-Key": "ak_1"}
		for i := 0; i < 5; i++ {
			resp := ask(t, addrs[i%3], "", h)
			want := http.StatusOK
			if i >= 3 {
				want = http.StatusTooManyRequests
			}
			if resp.StatusCode != want {
				t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
			}
			if got := resp.Header.Get("X-RateLimit-Limit"); got != "3" {
				t.Fatalf("request %d: X-RateLimit-Limit %q", i, got)
			}
			if (resp.Header.Get("Retry-After") != "") != (want != http.StatusOK) {
				t.Fatalf("request %d: Retry-After %q", i, resp.Header.Get("Retry-After"))
			}
			if resp.Header.Get("RateLimit-Policy") != `"orders";q=3;w=3600` {
				t.Fatalf("RateLimit-Policy %q", resp.Header.Get("RateLimit-Policy"))
			}
		}
		if resp := ask(t, addrs[1], "?deny_status=403", h); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("nginx mode: %d %v", resp.StatusCode, resp.Header)
		}
		// Another key, and another method, are not limited by it.
		if resp := ask(t, addrs[2], "", map[string]string{"X-Original-URI": "/v1/orders", "X-Original-Method": "GET", "X-API-Key": "ak_2"}); resp.StatusCode != http.StatusOK {
			t.Fatalf("other key: %d", resp.StatusCode)
		}
		if resp := ask(t, addrs[2], "", map[string]string{"X-Original-URI": "/v1/orders", "X-Original-Method": "POST", "X-API-Key": "ak_1"}); resp.StatusCode != http.StatusOK ||
			resp.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("unmatched method: %d %v", resp.StatusCode, resp.Header)
		}
	})

	t.Run("Traefik and Caddy headers, client IP", func(t *testing.T) {
		traefik := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/ip/a", "X-Forwarded-For": "203.0.113.9, 198.51.100.7"}
		for i := 0; i < 3; i++ {
			want := http.StatusOK
			if i == 2 {
				want = http.StatusTooManyRequests
			}
			if resp := ask(t, addrs[i%3], "", traefik); resp.StatusCode != want {
				t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
			}
		}
		// The limited key is the last hop (the address the proxy saw);
		// X-Real-IP (nginx) wins over X-Forwarded-For.
		other := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/ip/a", "X-Forwarded-For": "198.51.100.8"}
		if resp := ask(t, addrs[0], "", other); resp.StatusCode != http.StatusOK {
			t.Fatalf("another client: %d", resp.StatusCode)
		}
		real := map[string]string{"X-Original-URI": "/v1/ip/b", "X-Real-IP": "198.51.100.7", "X-Forwarded-For": "198.51.100.99"}
		if resp := ask(t, addrs[0], "", real); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("X-Real-IP: %d", resp.StatusCode)
		}
	})

	t.Run("shadow never denies", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			if resp := ask(t, addrs[i], "", map[string]string{"X-Original-URI": "/v1/shadow"}); resp.StatusCode != http.StatusOK {
				t.Fatalf("shadow: %d", resp.StatusCode)
			}
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, tc := range []struct {
			query string
			h     map[string]string
		}{
			{"?deny_status=500", map[string]string{"X-Original-URI": "/v1/orders"}},
			{"", map[string]string{"X-Original-URI": "not a path"}},
		} {
			if resp := ask(t, addrs[0], tc.query, tc.h); resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%v: %d, want 400", tc, resp.StatusCode)
			}
		}
		// Nothing was taken by them: ak_3 still has all 3.
		h := map[string]string{"X-Original-URI": "/v1/orders", "X-Original-Method": "GET", "X-API-Key": "ak_3"}
		if resp := ask(t, addrs[0], "", h); resp.Header.Get("X-RateLimit-Remaining") != "2" {
			t.Fatalf("remaining %q", resp.Header.Get("X-RateLimit-Remaining"))
		}
	})
}

// TestForwardAuthHeaderStyle: one node set to the older draft's fields,
// reading the API key from a header of its own.
func TestForwardAuthHeaderStyle(t *testing.T) {
	c := &testcluster.Cluster{T: t}
	t.Cleanup(c.Close)
	cfg := testcluster.Config(t, "n1")
	cfg.BootstrapExpect = 1
	cfg.HeaderStyle = "draft"
	cfg.ForwardAuthHeaders.APIKey = "X-Client"
	c.Start(cfg)
	c.WaitStable(1)
	c.ApplyRules(faRules)
	h := map[string]string{"X-Original-URI": "/v1/orders", "X-Original-Method": "GET", "X-Client": "c1"}
	var resp *http.Response
	for i := 0; i < 4; i++ {
		resp = ask(t, c.Nodes[0].HTTPAddr(), "", h)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("RateLimit-Limit") != "3" || resp.Header.Get("RateLimit-Remaining") != "0" ||
		resp.Header.Get("RateLimit-Reset") == "" || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("X-RateLimit-Limit") != "" || resp.Header.Get("RateLimit-Policy") != "" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	// Another X-Client is another key (with the header ignored, both would
	// be limited by the one client IP).
	h["X-Client"] = "c2"
	if resp := ask(t, c.Nodes[0].HTTPAddr(), "", h); resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit-Remaining") != "2" {
		t.Fatalf("another client: %d %v", resp.StatusCode, resp.Header)
	}
}
