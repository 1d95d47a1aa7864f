package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testlog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
)

// logBuffer is a log sink the client's goroutines may share.
type logBuffer struct{ testlog.Buffer }

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

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

// cacheRules has a fail-closed rule and a fail-open one.
const cacheRules = `
rules:
  - id: closed.write
    match: {route: /closed, method: POST}
    key: apikey
    rate: 100
    period: 1s
    fail_mode: closed
  - id: open.read
    match: {route: /open}
    key: apikey
    rate: 1
    period: 1h
    burst: 4
    fail_mode: open
`

// readCacheFile reads the rules cache at path, failing the test if it
// cannot.
func readCacheFile(t *testing.T, path string) cacheFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f cacheFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return f
}

// cacheAt waits until the rules cache at path holds version v.
func cacheAt(t *testing.T, path string, v uint64) {
	t.Helper()
	testwait.For(t, 10*time.Second, fmt.Sprintf("the rules cache at version %d", v), func() error {
		p, _, err := readRulesCache(path)
		if err != nil {
			return err
		}
		if p.GetVersion() != v {
			return fmt.Errorf("version %d", p.GetVersion())
		}
		return nil
	})
}

// A gateway whose cluster is unreachable when it starts, with the rules
// cache of an earlier run, enforces the cached rules from its first
// request: a fail_mode closed rule denies with 503 (the cluster cannot
// decide), a fail_mode open rule admits its local share and then 429,
// requests no rule matches pass. Without the cache it would hold no rules
// and (under allow, the old behaviour) pass everything.
func TestRulesCacheUsedWhenClusterUnreachable(t *testing.T) {
	c := testcluster.New(t, 1)
	v := c.ApplyRules(cacheRules)
	path := filepath.Join(t.TempDir(), "state", "gw1.rules.json") // the directory is created
	first := newTestClient(t, c, "gw1", func(cfg *Config) { cfg.RulesCache = path })
	cacheAt(t, path, v)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	addrs := c.GRPCAddrs()
	c.Kill(0) // nothing listens there any more

	var logs logBuffer
	cl := startClient(t, addrs, "gw1", func(cfg *Config) {
		cfg.RulesCache, cfg.Logger = path, logs.logger()
		cfg.UntilRules = UntilRulesAllow // what would pass everything without rules
	})
	if st := cl.RulesStatus(); !st.Ready || !st.Cached || st.Version != v {
		t.Errorf("right after New: %+v, want version %d from the cache", st, v)
	}
	if !strings.Contains(logs.String(), "rule set loaded from the rules cache") {
		t.Errorf("no log line about the cache:\n%s", logs.String())
	}
	url, reached := serve(t, cl)
	post := func(key string) answer {
		req, _ := http.NewRequest("POST", url+"/closed", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-RateLimit-Remaining"), strings.TrimSpace(string(b))}
	}
	for i := 0; i < 3; i++ {
		if a := post("ak_1"); a.status != http.StatusServiceUnavailable || a.retryAfter != "1" || !strings.Contains(a.body, "unavailable") {
			t.Fatalf("fail-closed rule from the cache, request %d: %+v; want 503 with Retry-After 1", i+1, a)
		}
	}
	admitted := 0
	for i := 0; i < 6; i++ {
		switch a := get(t, url, "/open", "ak_2"); a.status {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			if a.retryAfter == "" || a.remaining != "0" {
				t.Errorf("fail-open denial: %+v", a)
			}
		default:
			t.Fatalf("fail-open rule from the cache: %+v", a)
		}
	}
	if admitted != 4 {
		t.Errorf("fail-open rule (burst 4, one gateway) admitted %d of 6, want 4", admitted)
	}
	if a := get(t, url, "/elsewhere", "ak_3"); a.status != http.StatusOK {
		t.Errorf("no rule matches: %+v, want 200", a)
	}
	if n, st := reached(), cl.Stats(); n != 5 || st.UntilRules != 0 || st.Fallbacks != 9 {
		t.Errorf("upstream reached %d times, stats %+v; want 5, no until-rules decision, 9 fallbacks", n, st)
	}
	testwait.For(t, 10*time.Second, "the watch's failure in RulesStatus", func() error {
		if st := cl.RulesStatus(); st.Err == nil || !st.Cached {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}

// A cache that cannot be used is logged and ignored, never fatal: the
// client holds no rules (policy deny answers), and the cluster's set
// replaces the file once it arrives.
func TestRulesCacheCorruptIgnored(t *testing.T) {
	dir := t.TempDir()
	good := func(v uint64, rs string) string {
		return fmt.Sprintf(`{"format": %q, "version": %d, "rule_set": %s}`, cacheFormat, v, rs)
	}
	for _, tc := range []struct {
		name, content string
		dir           bool // a directory where the file should be
		err           string
	}{
		{name: "garbage", content: "\x00\x01 not json", err: "not a rules cache"},
		{name: "truncated", content: good(3, `{"version": "3", "rules": [`)[:40], err: "not a rules cache"},
		{name: "other-format", content: `{"format": "weir-gateway-rules/99", "version": 3, "rule_set": {}}`, err: "format"},
		{name: "no-rule-set", content: fmt.Sprintf(`{"format": %q, "version": 3}`, cacheFormat), err: "no rule_set"},
		{name: "bad-rule-set", content: good(3, `{"version": "3", "rules": 7}`), err: "rule_set"},
		{name: "versions-disagree", content: good(3, `{"version": "4"}`), err: "version 3, but rule_set.version 4"},
		{name: "bad-duration", content: good(3, `{"version": "3", "rules": [{"id": "r", "match": {"route": "/r"}, "key": "apikey", "rate": "1", "period": "soon"}]}`), err: "period"},
		{name: "invalid-rule", content: good(3, `{"version": "3", "rules": [{"id": "r", "match": {"route": "/r"}, "key": "nope", "rate": "1", "period": "1s"}]}`), err: "key"},
		{name: "a-directory", dir: true, err: "is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".json")
			if tc.dir {
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs logBuffer
			cl := startClient(t, []string{"127.0.0.1:1"}, "gw1", func(cfg *Config) {
				cfg.RulesCache, cfg.Logger, cfg.UntilRules = path, logs.logger(), UntilRulesDeny
			})
			if cl.Ready() {
				t.Fatalf("ready with a bad cache: %+v", cl.RulesStatus())
			}
			line := ""
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "ignoring the rules cache") {
					line = l
				}
			}
			if !strings.Contains(line, "level=WARN") || !strings.Contains(line, path) || !strings.Contains(line, tc.err) {
				t.Errorf("want a WARN line naming %s and %q; log:\n%s", path, tc.err, logs.String())
			}
			if d := cl.Decide(context.Background(), Request{Route: "/r"}); d.Status != http.StatusServiceUnavailable || !errors.Is(d.Err, ErrNotReady) {
				t.Errorf("decision: %+v, want the deny policy's 503", d)
			}
		})
	}

	// With the cluster up, its set replaces the corrupt file.
	c := testcluster.New(t, 1)
	v := c.ApplyRules(cacheRules)
	path := filepath.Join(dir, "garbage.json")
	newTestClient(t, c, "gw2", func(cfg *Config) { cfg.RulesCache = path })
	cacheAt(t, path, v)
}

// The cached set is used until the cluster sends its own; a newer one
// replaces it and is written to the file (and so is every later one). A
// stale cache never overrides a newer live set; a cache newer than what
// the cluster sends (a cluster rebuilt from empty data) is kept, with a
// warning.
func TestRulesCacheReplacedByNewerLiveSet(t *testing.T) {
	c := testcluster.New(t, 1)
	v1 := c.ApplyRules(cacheRules)
	// An override, so that the cache is seen to keep overrides too.
	resp, err := http.DefaultClient.Do(mustRequest(t, "PUT", "http://"+c.Nodes[0].HTTPAddr()+"/v1/overrides",
		`{"key": "apikey:ak_vip", "rule": "open.read", "rate": 10, "burst": 40}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("override: %d", resp.StatusCode)
	}
	testwait.For(t, 10*time.Second, "the override applied", func() error {
		if s := c.Nodes[0].Store().Current(); s.Version <= v1 {
			return fmt.Errorf("version %d", s.Version)
		}
		return nil
	})
	v1 = c.Nodes[0].Store().Current().Version
	path := filepath.Join(t.TempDir(), "rules.json")
	first := newTestClient(t, c, "gw1", func(cfg *Config) { cfg.RulesCache = path })
	cacheAt(t, path, v1)
	f := readCacheFile(t, path)
	p, _, err := readRulesCache(path)
	if err != nil || f.Format != cacheFormat || f.Version != v1 || f.GatewayID != "gw1" || f.SavedAt.IsZero() ||
		len(p.GetRules()) != 2 || p.GetRules()[0].GetFailMode() != "closed" ||
		len(p.GetOverrides()) != 1 || p.GetOverrides()[0].GetKey() != "apikey:ak_vip" {
		t.Errorf("cache file (%v): %+v\n%s", err, f, f.RuleSet)
	}
	if !strings.Contains(string(f.RuleSet), `"fail_mode"`) {
		t.Errorf("the cache's rule set does not use the rules file's field names:\n%s", f.RuleSet)
	}
	if fi, err := os.Stat(path); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("cache file mode %v, want 0600", fi.Mode())
	}
	_ = first.Close()

	// The cluster moves on while no gateway runs.
	v2 := c.ApplyRules(cacheRules + `
  - id: added
    match: {route: /added}
    key: global
    rate: 1
    period: 1h
`)
	lk := newLink()
	lk.Cut()
	cl := startClient(t, c.GRPCAddrs(), "gw1", func(cfg *Config) { cfg.RulesCache, cfg.Dial = path, lk.Dial })
	st := cl.RulesStatus()
	if !st.Cached || st.Version != v1 {
		t.Fatalf("with the link cut: %+v, want the cache's version %d", st, v1)
	}
	if rs := cl.rules.Load(); len(rs.set.Overrides) != 1 || rs.set.Overrides[0].Burst != 40 {
		t.Errorf("overrides from the cache: %+v", rs.set.Overrides)
	}
	if d := cl.Decide(context.Background(), Request{Route: "/added", Method: "GET"}); len(d.Limits) != 0 {
		t.Errorf("a rule of version %d applied while the cache (version %d) is in use: %+v", v2, v1, d)
	}
	lk.Restore()
	testwait.For(t, 20*time.Second, "the cluster's set", func() error {
		if st := cl.RulesStatus(); st.Cached || st.Version != v2 || st.Err != nil {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	cacheAt(t, path, v2)
	if p, _, err := readRulesCache(path); err != nil || len(p.GetRules()) != 3 || p.GetRules()[0].GetId() != "added" {
		t.Errorf("the rewritten cache lacks rule added (%v): %v", err, p)
	}
	// Later sets are written too.
	v3 := c.ApplyRules(cacheRules)
	cacheAt(t, path, v3)
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}

	// A cache newer than the cluster: kept (versions never go back), with
	// a warning saying what to do.
	p, _, err = readRulesCache(path)
	if err != nil {
		t.Fatal(err)
	}
	p.Version += 1000
	if err := writeRulesCache(path, p, "gw0", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	ahead := startClient(t, c.GRPCAddrs(), "gw1", func(cfg *Config) { cfg.RulesCache, cfg.Logger = path, logs.logger() })
	testwait.For(t, 20*time.Second, "the warning about an older cluster", func() error {
		if !strings.Contains(logs.String(), "older than the cached one") {
			return errors.New("no warning yet")
		}
		return nil
	})
	if st := ahead.RulesStatus(); !st.Cached || st.Version != p.Version {
		t.Errorf("status %+v, want the cache's version %d kept", st, p.Version)
	}
}

func mustRequest(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// WaitReady that times out says why the rules did not come (the watch's
// last error), not only that the context ended.
func TestWaitReadySaysWhy(t *testing.T) {
	c := testcluster.New(t, 1)
	addrs := c.GRPCAddrs()
	c.Kill(0) // nothing listens there any more
	cl := startClient(t, addrs, "gw1", nil)
	var cause error
	testwait.For(t, 10*time.Second, "the watch's failure in RulesStatus", func() error {
		if cause = cl.RulesStatus().Err; cause == nil {
			return errors.New("no error yet")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := cl.WaitReady(ctx)
	if !errors.Is(err, ErrNotReady) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady: %v, want ErrNotReady and the deadline", err)
	}
	if !errors.Is(err, cause) && !strings.Contains(err.Error(), cause.Error()) {
		t.Fatalf("WaitReady: %v; it hides the cause %q", err, cause)
	}
}

// A cluster address that is a node's HTTP port: the watch's error says so.
func TestClusterAddrOfHTTPPortNamesTheMistake(t *testing.T) {
	c := testcluster.New(t, 1)
	cl := startClient(t, []string{c.Live()[0].HTTPAddr()}, "gw1", nil)
	testwait.For(t, 10*time.Second, "the watch's failure naming the HTTP port", func() error {
		if err := cl.RulesStatus().Err; err == nil || !strings.Contains(err.Error(), "likely a node's HTTP port") {
			return fmt.Errorf("RulesStatus().Err = %v", err)
		}
		return nil
	})
}
