package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

const testRules = `
rules:
  - id: hdr
    match: {route: /h, method: GET}
    key: apikey
    rate: 1
    period: 1h
    burst: 3
    timeout: 2s # exact counts under -race on a busy box: no fallback
  - id: openr
    match: {route: /open}
    key: apikey
    rate: 1
    period: 1h
    burst: 4
    fail_mode: open
  - id: closedr
    match: {route: /closed}
    key: apikey
    rate: 100
    period: 1s
    fail_mode: closed
  - id: leased
    match: {route: /lease}
    key: apikey
    rate: 1
    period: 59m # under an hour: longer windows are never leased
    burst: 50
    lease: 5
    timeout: 200ms
  - id: leaseslow
    match: {route: /leaseslow}
    key: apikey
    rate: 10
    period: 1m
    burst: 10
    lease: 5
    timeout: 2s
  - id: byhdr
    match: {route: /tenant}
    key: header:X-Tenant
    rate: 1
    period: 1h
    burst: 2
    timeout: 2s
  - id: shadowr
    match: {route: /shadow}
    key: apikey
    rate: 1
    period: 1h
    burst: 1
    shadow: true
  - id: exact
    match: {route: /exact}
    key: apikey
    rate: 1
    period: 1h
    burst: 3
    timeout: 2s # exact counts under -race on a busy box: no fallback
`

func newTestClient(t testing.TB, c *testcluster.Cluster, id string, mod func(*Config)) *Client {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Cluster = c.GRPCAddrs()
	cfg.GatewayID = id
	if mod != nil {
		mod(&cfg)
	}
	cl, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return cl
}

// startWith starts a 1-node cluster with testRules and a client that has
// them.
func startWith(t *testing.T, mod func(*Config)) (*testcluster.Cluster, *Client) {
	c := testcluster.New(t, 1)
	v := c.ApplyRules(testRules)
	cl := newTestClient(t, c, "gw1", mod)
	testwait.For(t, 10*time.Second, "the client ready", func() error {
		if got := cl.RulesVersion(); got < v {
			return fmt.Errorf("client has version %d, want %d", got, v)
		}
		if cl.view.Load() == nil {
			return fmt.Errorf("no member view yet")
		}
		return nil
	})
	return c, cl
}

func TestHeadersAnd429Sequence(t *testing.T) {
	_, cl := startWith(t, nil)
	srv := httptest.NewServer(cl.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	defer srv.Close()
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+"/h", nil)
		req.Header.Set("X-API-Key", "ak_1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i, want := range []string{"2", "1", "0"} {
		resp := get()
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i+1, resp.StatusCode)
		}
		h := resp.Header
		if got := h.Get("X-RateLimit-Remaining"); got != want {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want %q", i+1, got, want)
		}
		if got := h.Get("X-RateLimit-Limit"); got != "3" {
			t.Errorf("request %d: X-RateLimit-Limit %q, want 3", i+1, got)
		}
		if got := h.Get("RateLimit-Policy"); got != `"hdr";q=3;w=3600` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
		if got := h.Get("RateLimit"); !strings.HasPrefix(got, `"hdr";r=`+want+";t=") {
			t.Errorf("request %d: RateLimit %q", i+1, got)
		}
		if h.Get("Retry-After") != "" {
			t.Errorf("request %d: Retry-After on an allowed response", i+1)
		}
	}
	rpcs := cl.Stats().RPCs
	for i := 0; i < 2; i++ { // the second 429 comes from the blocked-until cache
		resp := get()
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 429 {
			t.Fatalf("denied request %d: status %d", i+1, resp.StatusCode)
		}
		if got := resp.Header.Get("Retry-After"); got != "3600" {
			t.Errorf("Retry-After %q, want 3600", got)
		}
		if got := resp.Header.Get("X-RateLimit-Remaining"); got != "0" {
			t.Errorf("X-RateLimit-Remaining %q, want 0", got)
		}
		var out struct {
			Error        string `json:"error"`
			RetryAfterMs int64  `json:"retry_after_ms"`
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		if out.Error != "rate limited" || out.RetryAfterMs <= 3_500_000 || out.RetryAfterMs > 3_600_000 {
			t.Errorf("body %+v", out)
		}
	}
	if got := cl.Stats().RPCs - rpcs; got != 1 {
		t.Errorf("%d RPCs for two denied requests; want 1 (second from blocked-until cache)", got)
	}
	if cl.Stats().BlockedHits != 1 {
		t.Errorf("BlockedHits %d, want 1", cl.Stats().BlockedHits)
	}
	// Another key is unaffected; no rule → no headers.
	d := cl.Decide(context.Background(), Request{Route: "/h", Method: "GET", APIKey: "ak_2"})
	if !d.Allowed || d.Policy == nil || d.Policy.Remaining != 2 {
		t.Errorf("other key: %+v", d)
	}
	d = cl.Decide(context.Background(), Request{Route: "/nothing", Method: "GET", APIKey: "ak_2"})
	if !d.Allowed || d.Policy != nil || len(d.Limits) != 0 {
		t.Errorf("unmatched route: %+v", d)
	}
	// Through the middleware (its shortcut for a route no rule matches):
	// passed on, no rate-limit header, no RPC; the denied key stays denied
	// on the rule's route.
	rpcs = cl.Stats().RPCs
	req, _ := http.NewRequest("GET", srv.URL+"/nothing", nil)
	req.Header.Set("X-API-Key", "ak_1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" || resp.Header.Get("X-RateLimit-Limit") != "" || resp.Header.Get("RateLimit") != "" {
		t.Errorf("unmatched route through the middleware: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if got := cl.Stats().RPCs - rpcs; got != 0 {
		t.Errorf("%d RPCs for an unmatched route", got)
	}
	resp = get()
	resp.Body.Close()
	if resp.StatusCode != 429 {
		t.Errorf("rule's route after: status %d, want 429", resp.StatusCode)
	}
}

func TestShadowNeverBlocks(t *testing.T) {
	_, cl := startWith(t, nil)
	for i := 0; i < 3; i++ {
		d := cl.Decide(context.Background(), Request{Route: "/shadow", Method: "GET", APIKey: "ak_s"})
		if !d.Allowed || d.Status != 200 || len(d.Limits) != 1 || !d.Limits[0].Shadow {
			t.Fatalf("request %d: %+v", i+1, d)
		}
		if i > 0 && d.Limits[0].Allowed { // reported as the cluster saw it
			// shadow results report the cluster's verdict in Allowed
			t.Logf("shadow limit reports allowed on request %d", i+1)
		}
	}
}

func TestFailModesWithClusterDown(t *testing.T) {
	clk := newFakeClock() // the breaker stays open until the test moves it
	c, cl := startWith(t, func(cfg *Config) {
		cfg.BreakerFailures = 2
		cfg.BreakerCooldown = time.Hour
		cfg.Now = clk.Now
	})
	ctx := context.Background()
	testwait.For(t, 10*time.Second, "a closed-rule decision from the cluster", func() error {
		clk.Advance(time.Hour) // a slow first answer under -race may have opened the breaker
		if d := cl.Decide(ctx, Request{Route: "/closed", Method: "GET", APIKey: "ak_c"}); d.Status != 200 || d.Limits[0].Fallback {
			return fmt.Errorf("closed rule with cluster up: %+v", d)
		}
		return nil
	})
	opens := cl.Stats().BreakerOpens
	c.Kill(0)
	// Closed: 503 with Retry-After 1s, each a fallback.
	for i := 0; i < 5; i++ {
		d := cl.Decide(ctx, Request{Route: "/closed", Method: "GET", APIKey: "ak_c"})
		if d.Allowed || d.Status != 503 || d.RetryAfter != time.Second || !d.Limits[0].Fallback {
			t.Fatalf("closed request %d: %+v", i+1, d)
		}
	}
	s := cl.Stats()
	if s.BreakerOpens != opens+1 {
		t.Fatalf("breaker opened %d times, want 1 (stats %+v)", s.BreakerOpens-opens, s)
	}
	// Once open, no request reaches (or waits for) the dead node.
	rpcs, rejects := s.RPCs, s.BreakerRejects
	for i := 0; i < 20; i++ {
		cl.Decide(ctx, Request{Route: "/closed", Method: "GET", APIKey: "ak_c"})
	}
	s = cl.Stats()
	if s.RPCs != rpcs || s.BreakerRejects != rejects+20 {
		t.Errorf("after the breaker opened: %d more RPCs, %d more rejects; want 0 and 20", s.RPCs-rpcs, s.BreakerRejects-rejects)
	}
	// Open: the local share (burst 4 / 1 gateway) passes, then 429.
	var allowed int
	for i := 0; i < 10; i++ {
		d := cl.Decide(ctx, Request{Route: "/open", Method: "GET", APIKey: "ak_o"})
		if d.Allowed {
			allowed++
		} else if d.Status != 429 || d.RetryAfter <= 0 {
			t.Errorf("open request %d denied oddly: %+v", i+1, d)
		}
		if !d.Limits[0].Fallback {
			t.Errorf("open request %d not marked fallback", i+1)
		}
	}
	if want := 4 / cl.Gateways(); allowed != want {
		t.Errorf("fail-open allowed %d, want the local share %d", allowed, want)
	}
	fallbacks := testutilCount(t, cl)
	if fallbacks < 35 {
		t.Errorf("fallback metric %v, want >= 35", fallbacks)
	}
}

// testutilCount sums weir_client_fallback_decisions_total.
func testutilCount(t *testing.T, cl *Client) float64 {
	t.Helper()
	return float64(cl.Stats().Fallbacks)
}

func TestRuleChangeReachesClient(t *testing.T) {
	c, cl := startWith(t, nil)
	start := time.Now()
	v := c.ApplyRules(testRules + `
  - id: added
    match: {route: /added}
    key: global
    rate: 1
    period: 1h
    burst: 1
    timeout: 2s
`)
	// The timeout: with the default 5 ms a loaded machine can let the fail
	// mode (open, a local share) answer the first check while the node
	// never sees it, and the second then takes the node's token.
	testwait.For(t, 5*time.Second, "the new rules at the client", func() error {
		if got := cl.RulesVersion(); got < v {
			return fmt.Errorf("version %d < %d", got, v)
		}
		return nil
	})
	t.Logf("rule change reached the client in %v", time.Since(start))
	ctx := context.Background()
	if d := cl.Decide(ctx, Request{Route: "/added", Method: "GET"}); !d.Allowed || d.Policy == nil || d.Policy.Rule != "added" || d.Limits[0].Fallback {
		t.Fatalf("first: %+v", d)
	}
	if d := cl.Decide(ctx, Request{Route: "/added", Method: "GET"}); d.Allowed || d.Status != 429 {
		t.Fatalf("second: %+v", d)
	}
}

func TestLeasesBound(t *testing.T) {
	c, cl1 := startWith(t, nil)
	cl2 := newTestClient(t, c, "gw2", nil)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, cl := range []*Client{cl1, cl2} {
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 40; i++ {
					if d := cl.Decide(context.Background(), Request{Route: "/lease", Method: "GET", APIKey: "hot"}); d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	const burst, lease, gateways = 50, 5, 2
	got := admitted.Load()
	t.Logf("admitted %d of 320 (burst %d, lease %d, gateways %d); lease hits %d+%d",
		got, burst, lease, gateways, cl1.Stats().LeaseHits, cl2.Stats().LeaseHits)
	if got > burst+lease*gateways {
		t.Errorf("admitted %d > burst + lease×gateways = %d", got, burst+lease*gateways)
	}
	if got < burst-lease*gateways {
		t.Errorf("admitted %d < burst - lease×gateways = %d", got, burst-lease*gateways)
	}
	if cl1.Stats().LeaseHits+cl2.Stats().LeaseHits == 0 {
		t.Error("no decision was served from a lease")
	}
}

// TestLeaseDeniedHoldsTheKeyForALease: once a leased key is spent, the
// denial waits for a whole lease (5 tokens at 10 per minute: 30 s, not the
// 6 s of one token) and the blocked-until cache answers the next denial
// without asking the owner: a hot key over its limit stops reaching the
// cluster. Decision.Local says which decisions were made here: those
// from the lease and the cached denial, not the grabs and the first
// denial.
func TestLeaseDeniedHoldsTheKeyForALease(t *testing.T) {
	_, cl := startWith(t, nil)
	req := Request{Route: "/leaseslow", Method: "GET", APIKey: "spent"}
	local := 0
	for i := 1; i <= 10; i++ {
		rpcs := cl.Stats().RPCs
		d := cl.Decide(context.Background(), req)
		if !d.Allowed || d.Limits[0].Fallback {
			t.Fatalf("request %d: %+v, want allowed by the cluster or a lease", i, d)
		}
		if asked := cl.Stats().RPCs != rpcs; d.Local == asked {
			t.Fatalf("request %d: Local %v, but it asked the cluster: %v", i, d.Local, asked)
		}
		if d.Local {
			local++
		}
	}
	if local != 8 { // two grabs of 5, four from each lease
		t.Errorf("%d of 10 decisions local, want 8", local)
	}
	rpcs := cl.Stats().RPCs
	for i := 0; i < 2; i++ {
		d := cl.Decide(context.Background(), req)
		if d.Allowed || d.Status != http.StatusTooManyRequests {
			t.Fatalf("request %d after the burst: %+v, want 429", 11+i, d)
		}
		if d.Local != (i == 1) {
			t.Errorf("request %d after the burst: Local %v, want %v (the second from the blocked-until cache)", 11+i, d.Local, i == 1)
		}
		if d.RetryAfter <= 24*time.Second || d.RetryAfter > 30*time.Second {
			t.Fatalf("request %d: Retry-After %v, want the wait for a whole lease (30s)", 11+i, d.RetryAfter)
		}
	}
	if got := cl.Stats().RPCs - rpcs; got != 1 {
		t.Errorf("%d requests to the owner for 2 denials, want 1 (the second from the blocked-until cache)", got)
	}
}

func TestLeaseRefundOnClose(t *testing.T) {
	_, cl := startWith(t, nil)
	d := cl.Decide(context.Background(), Request{Route: "/lease", Method: "GET", APIKey: "refund"})
	if !d.Allowed {
		t.Fatalf("%+v", d)
	}
	_ = cl.Close()
	if got := cl.Stats().LeaseRefunds; got != 4 {
		t.Errorf("refunded %d tokens on Close, want 4", got)
	}
}

func TestBadInput(t *testing.T) {
	_, cl := startWith(t, func(cfg *Config) {
		cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	ctx := context.Background()
	huge := strings.Repeat("k", 1<<20)
	d := cl.Decide(ctx, Request{Route: "/h", Method: "GET", APIKey: huge})
	if !d.Allowed || len(d.Limits) != 1 || len(d.Limits[0].Key) > MaxKeyLen || !strings.HasPrefix(d.Limits[0].Key, "apikey:~") {
		t.Errorf("huge api key: %+v", d.Limits)
	}
	d = cl.Decide(ctx, Request{Route: "/h", Method: "GET", IP: "198.51.100.9"})
	if !d.Allowed || d.Limits[0].Key != "ip:198.51.100.9" {
		t.Errorf("missing api key: %+v", d.Limits)
	}
	d = cl.Decide(ctx, Request{Route: "/tenant", Method: "GET"})
	if !d.Allowed || d.Limits[0].Key != "header:X-Tenant:-" {
		t.Errorf("missing header: %+v", d.Limits)
	}
	d = cl.Decide(ctx, Request{Route: "/h", Method: "GET"})
	if !d.Allowed || d.Limits[0].Key != "ip:unknown" {
		t.Errorf("no key at all: %+v", d.Limits)
	}

	// Through HTTP: a 100 KB header and malformed forwarding headers.
	var seen atomic.Int64
	srv := httptest.NewServer(cl.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen.Add(1) })))
	defer srv.Close()
	for _, h := range []map[string]string{
		{"X-API-Key": strings.Repeat("x", 100<<10)},
		{"X-Forwarded-For": "not-an-ip, ,,"},
		{"X-Forwarded-For": strings.Repeat("1.2.3.4,", 2000)},
		{"Forwarded": `for="_hidden";proto=http, for=`},
		{"Forwarded": `for="[2001:db8::1]:4711"`},
		{"X-Plan": strings.Repeat("p", 5000)},
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/tenant", nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		req.Header.Set("X-Tenant", fmt.Sprint(len(h)+int(seen.Load())))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "2" {
			t.Errorf("headers %.40v: status %d, limit %q", h, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"))
		}
	}
}

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, tc := range []struct {
		remote string
		hdr    map[string]string
		want   string
	}{
		{"203.0.113.7:1234", nil, "203.0.113.7"},
		{"203.0.113.7:1234", map[string]string{"X-Forwarded-For": "1.1.1.1"}, "203.0.113.7"}, // untrusted peer
		{"10.0.0.1:80", map[string]string{"X-Forwarded-For": "1.1.1.1, 2.2.2.2, 10.0.0.5"}, "2.2.2.2"},
		{"10.0.0.1:80", map[string]string{"X-Forwarded-For": "10.1.1.1, 10.0.0.5"}, "10.1.1.1"},
		{"10.0.0.1:80", map[string]string{"X-Forwarded-For": "1.1.1.1, garbage"}, "10.0.0.1"},
		{"10.0.0.1:80", map[string]string{"Forwarded": `for=192.0.2.60;proto=http, for="[2001:db8::2]:99"`}, "2001:db8::2"},
		{"10.0.0.1:80", map[string]string{"Forwarded": `for=unknown`}, "10.0.0.1"},
		{"[::1]:80", map[string]string{"X-Forwarded-For": "::ffff:1.2.3.4"}, "1.2.3.4"},
		{"garbage", nil, ""},
		{"10.0.0.1:80", map[string]string{"X-Forwarded-For": strings.Repeat("9.9.9.9,", 1000)}, "10.0.0.1"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		for k, v := range tc.hdr {
			r.Header.Set(k, v)
		}
		if got := ClientIP(r, trusted); got != tc.want {
			t.Errorf("ClientIP(%q, %.60v) = %q, want %q", tc.remote, tc.hdr, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err == nil {
		t.Error("default config without Cluster validated")
	}
	cfg := DefaultConfig()
	cfg.Cluster, cfg.GatewayID = []string{"127.0.0.1:1"}, "g"
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	cfg.MaxBatch = 0
	if err := cfg.Validate(); err == nil {
		t.Error("MaxBatch 0 validated")
	}
}

// TestCloseJoinsGoroutines runs a client against an address nobody serves
// and checks Close leaves no goroutine behind, and ends a decision waiting
// for the rules (UntilRulesWait) with a denial.
func TestCloseJoinsGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := DefaultConfig()
	cfg.Cluster, cfg.GatewayID, cfg.UntilRulesTimeout = []string{"127.0.0.1:1"}, "g", time.Minute
	cl, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan Decision, 1)
	go func() { waiting <- cl.Decide(context.Background(), Request{Route: "/x", Method: "GET"}) }()
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if d := <-waiting; d.Allowed || d.Status != http.StatusServiceUnavailable || !errors.Is(d.Err, ErrNotReady) {
		t.Errorf("before rules, ended by Close: %+v, want a 503 with ErrNotReady", d)
	}
}
