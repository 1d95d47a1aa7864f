package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirlimit/weir/internal/testcluster"
)

// startClient starts a client on addrs without waiting for its rules.
func startClient(t *testing.T, addrs []string, id string, mod func(*Config)) *Client {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Cluster, cfg.GatewayID = addrs, id
	if mod != nil {
		mod(&cfg)
	}
	cl, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// serve puts cl's middleware in front of a handler answering "upstream"
// and returns the server's URL and a count of requests that reached it.
func serve(t *testing.T, cl *Client) (string, func() int) {
	t.Helper()
	var mu sync.Mutex
	reached := 0
	srv := httptest.NewServer(cl.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		reached++
		mu.Unlock()
		_, _ = io.WriteString(w, "upstream")
	})))
	t.Cleanup(srv.Close)
	return srv.URL, func() int {
		mu.Lock()
		defer mu.Unlock()
		return reached
	}
}

// answer is what one request through the middleware got.
type answer struct {
	status                      int
	retryAfter, remaining, body string
}

func get(t *testing.T, url, path, apiKey string) answer {
	t.Helper()
	req, _ := http.NewRequest("GET", url+path, nil)
	req.Header.Set("X-API-Key", apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-RateLimit-Remaining"), strings.TrimSpace(string(b))}
}

// untilRulesCount reads weir_client_until_rules_decisions_total{policy,outcome}.
func untilRulesCount(t *testing.T, reg *prometheus.Registry, policy, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "weir_client_until_rules_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["policy"] == policy && l["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A fresh gateway with policy deny, whose cluster has rules it cannot
// reach yet, answers 503 with Retry-After and reaches nothing; once its
// link is back it enforces the rules (the counts of rule hdr, then 429).
func TestUntilRulesDenyThenEnforce(t *testing.T) {
	c := testcluster.New(t, 1)
	c.ApplyRules(testRules)
	lk, reg := newLink(), prometheus.NewRegistry()
	lk.Cut()
	cl := startClient(t, c.GRPCAddrs(), "gw1", func(cfg *Config) {
		cfg.UntilRules, cfg.Dial, cfg.Registry = UntilRulesDeny, lk.Dial, reg
	})
	url, reached := serve(t, cl)
	for i := 0; i < 3; i++ {
		a := get(t, url, "/h", "ak_1")
		if a.status != http.StatusServiceUnavailable || a.retryAfter != "1" || a.remaining != "" ||
			!strings.Contains(a.body, "not ready") {
			t.Fatalf("before rules, request %d: %+v; want 503, Retry-After 1, no limit headers, a not-ready body", i+1, a)
		}
	}
	if d := cl.Decide(context.Background(), Request{Route: "/h", Method: "GET", APIKey: "ak_1"}); d.Allowed ||
		d.Status != http.StatusServiceUnavailable || !errors.Is(d.Err, ErrNotReady) || len(d.Limits) != 0 {
		t.Errorf("Decide before rules: %+v, want denied 503 with ErrNotReady", d)
	}
	if n := reached(); n != 0 {
		t.Fatalf("%d requests reached the upstream before the rules", n)
	}
	if got, st := untilRulesCount(t, reg, "deny", "denied"), cl.Stats(); got != 4 || st.UntilRules != 4 || st.RPCs != 0 {
		t.Errorf("until_rules{deny,denied} %v, Stats %+v; want 4 denials and no RPC", got, st)
	}

	lk.Restore()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"2", "1", "0"} {
		if a := get(t, url, "/h", "ak_1"); a.status != http.StatusOK || a.remaining != want || a.body != "upstream" {
			t.Fatalf("with rules, request %d: %+v; want 200 with %s remaining", i+1, a, want)
		}
	}
	if a := get(t, url, "/h", "ak_1"); a.status != http.StatusTooManyRequests || a.retryAfter == "" {
		t.Fatalf("over the limit: %+v; want 429 with Retry-After", a)
	}
	if n := reached(); n != 3 {
		t.Errorf("%d requests reached the upstream, want 3", n)
	}
}

// Policy wait holds a decision until the rules arrive and then decides it
// by them; a wait that times out (or whose context ends) is a denial.
func TestUntilRulesWait(t *testing.T) {
	c := testcluster.New(t, 1)
	c.ApplyRules(testRules)
	lk, reg := newLink(), prometheus.NewRegistry()
	lk.Cut()
	cl := startClient(t, c.GRPCAddrs(), "gw1", func(cfg *Config) {
		cfg.Dial, cfg.Registry = lk.Dial, reg
		cfg.UntilRulesTimeout = time.Minute
	})
	if cl.cfg.UntilRules != UntilRulesWait {
		t.Fatalf("default UntilRules %q, want wait", cl.cfg.UntilRules)
	}
	req := Request{Route: "/h", Method: "GET", APIKey: "ak_w"}

	// A context that ends first: denied.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	d := cl.Decide(ctx, req)
	cancel()
	if d.Allowed || d.Status != http.StatusServiceUnavailable || !errors.Is(d.Err, ErrNotReady) {
		t.Fatalf("wait whose context ended: %+v, want denied with ErrNotReady", d)
	}

	done := make(chan Decision, 1)
	go func() { done <- cl.Decide(context.Background(), req) }()
	select {
	case d := <-done:
		t.Fatalf("Decide returned before the rules arrived: %+v", d)
	case <-time.After(100 * time.Millisecond): // it is waiting
	}
	lk.Restore()
	select {
	case d := <-done:
		if !d.Allowed || d.Err != nil || len(d.Limits) != 1 || d.Limits[0].Rule != "hdr" || d.Limits[0].Remaining != 2 {
			t.Fatalf("waited decision: %+v, want allowed by rule hdr with 2 left", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no decision 30s after the link came back")
	}
	if w, dn := untilRulesCount(t, reg, "wait", "waited"), untilRulesCount(t, reg, "wait", "denied"); w != 1 || dn != 1 {
		t.Errorf("until_rules{wait}: waited %v denied %v, want 1 and 1", w, dn)
	}

	// UntilRulesTimeout bounds the wait when the context does not.
	short := startClient(t, []string{"127.0.0.1:1"}, "gw2", func(cfg *Config) { cfg.UntilRulesTimeout = 50 * time.Millisecond })
	start := time.Now()
	d = short.Decide(context.Background(), req)
	if took := time.Since(start); d.Allowed || d.Status != http.StatusServiceUnavailable || took < 50*time.Millisecond || took > 10*time.Second {
		t.Errorf("wait with UntilRulesTimeout 50ms: %+v after %v, want a 503 after about 50ms", d, took)
	}
}

// Policy allow passes with no limits before the rules, counted.
func TestUntilRulesAllow(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl := startClient(t, []string{"127.0.0.1:1"}, "gw1", func(cfg *Config) {
		cfg.UntilRules, cfg.Registry = UntilRulesAllow, reg
	})
	url, reached := serve(t, cl)
	if a := get(t, url, "/h", "ak_1"); a.status != http.StatusOK || a.remaining != "" || a.body != "upstream" || reached() != 1 {
		t.Errorf("allow before rules: %+v, want 200 from the upstream, no limit headers", a)
	}
	if d := cl.Decide(context.Background(), Request{Route: "/h"}); !d.Allowed || !errors.Is(d.Err, ErrNotReady) || d.Policy != nil {
		t.Errorf("Decide: %+v, want allowed, no policy, ErrNotReady", d)
	}
	if got, st := untilRulesCount(t, reg, "allow", "allowed"), cl.Stats(); got != 2 || st.UntilRules != 2 {
		t.Errorf("until_rules{allow,allowed} %v, Stats.UntilRules %d; want 2", got, st.UntilRules)
	}
}

func TestUntilRulesConfig(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.UntilRules = "" }, `UntilRules "": want wait, deny or allow`},
		{func(c *Config) { c.UntilRules = "open" }, `UntilRules "open": want wait, deny or allow`},
		{func(c *Config) { c.UntilRulesTimeout = 0 }, "UntilRulesTimeout 0s: must be > 0"},
	} {
		cfg := DefaultConfig()
		cfg.Cluster, cfg.GatewayID = []string{"a:1"}, "g"
		tc.mod(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate: %v, want %q", err, tc.want)
		}
	}
	cfg := DefaultConfig()
	cfg.Cluster, cfg.GatewayID, cfg.UntilRules, cfg.UntilRulesTimeout = []string{"a:1"}, "g", UntilRulesDeny, 0
	if err := cfg.Validate(); err != nil {
		t.Errorf("deny needs no timeout: %v", err)
	}
}
