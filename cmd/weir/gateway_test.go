package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testlog"
	"github.com/weirlimit/weir/internal/testwait"
)

// gate is a TCP relay to a node's gRPC address that the test opens and
// shuts: shut, it accepts connections and closes them at once (the
// cluster is unreachable); open, it relays bytes both ways.
type gate struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	open  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newGate(t *testing.T, to string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, to: to, conns: map[net.Conn]struct{}{}}
	g.wg.Add(1)
	go g.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		g.set(false)
		g.wg.Wait()
	})
	return g
}

func (g *gate) addr() string { return g.ln.Addr().String() }

func (g *gate) accept() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		if !g.open {
			g.mu.Unlock()
			_ = c.Close()
			continue
		}
		u, err := net.Dial("tcp", g.to)
		if err != nil {
			g.mu.Unlock()
			_ = c.Close()
			continue
		}
		g.conns[c], g.conns[u] = struct{}{}, struct{}{}
		g.wg.Add(2)
		g.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer g.wg.Done()
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		go pipe(u, c)
		go pipe(c, u)
	}
}

// set opens or shuts the gate; shutting it cuts every relayed connection.
func (g *gate) set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = open
	if !open {
		for c := range g.conns {
			_ = c.Close()
		}
		clear(g.conns)
	}
}

// runningGateway is `weir gateway` run in-process.
type runningGateway struct {
	url    string
	stderr *testlog.Buffer
	stop   func() // cancels it and checks it exited 0
}

var listenRe = regexp.MustCompile(`msg="weir gateway started" listen=(\S+)`)

func startGatewayCLI(t *testing.T, args ...string) *runningGateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &runningGateway{stderr: &testlog.Buffer{}}
	var out testlog.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"gateway", "--listen", "127.0.0.1:0"}, args...),
			strings.NewReader(""), &out, g.stderr, func(string) string { return "" })
	}()
	stopped := false
	g.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("weir gateway exited %d; stderr:\n%s", code, g.stderr.String())
		}
	}
	t.Cleanup(g.stop)
	testwait.For(t, 20*time.Second, "weir gateway to start", func() error {
		if m := listenRe.FindStringSubmatch(g.stderr.String()); m != nil {
			g.url = "http://" + m[1]
			return nil
		}
		select {
		case code := <-done:
			done <- code
			stopped = true
			t.Fatalf("weir gateway exited %d early; stderr:\n%s", code, g.stderr.String())
		default:
		}
		return errors.New("not started yet")
	})
	return g
}

type gwAnswer struct {
	status                      int
	retryAfter, remaining, body string
}

func (g *runningGateway) do(t *testing.T, method, path, apiKey string) gwAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, g.url+path, nil)
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return gwAnswer{resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-RateLimit-Remaining"), strings.TrimSpace(string(b))}
}

const gatewayTestRules = `
rules:
  - id: h
    match: {route: /h, method: GET}
    key: apikey
    rate: 1
    period: 1h
    burst: 3
    timeout: 2s # exact counts under -race on a busy box: no fallback
  - id: closed.write
    match: {route: /closed, method: POST}
    key: apikey
    rate: 100
    period: 1s
    fail_mode: closed
`

// TestGatewayUntilRulesAndRulesCache runs `weir gateway` against a node
// behind a gate. Policy deny, gate shut: /readyz 503 with the reason and
// every request 503 with Retry-After, none reaching the upstream. Gate
// open: /readyz 200, the rules enforced (3 then 429), the rules cache
// written. A second gateway on the same cache with the gate shut is ready
// at once and enforces the cached fail_mode closed rule (503) instead of
// passing everything.
func TestGatewayUntilRulesAndRulesCache(t *testing.T) {
	c := testcluster.New(t, 1)
	v := c.ApplyRules(gatewayTestRules)
	gt := newGate(t, c.Nodes[0].GRPCAddr())
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, "upstream")
	}))
	defer up.Close()
	cache := filepath.Join(t.TempDir(), "weir", "gateway-rules.json")
	args := []string{"--upstream", up.URL, "--cluster", gt.addr(), "--rules-cache", cache, "--id", "gw-test"}

	gw := startGatewayCLI(t, append(args, "--until-rules", "deny")...)
	testwait.For(t, 10*time.Second, "/readyz 503 with the watch's failure", func() error {
		a := gw.do(t, "GET", "/readyz", "")
		if a.status != http.StatusServiceUnavailable || !strings.HasPrefix(a.body, "not ready: no rule set yet") {
			t.Fatalf("/readyz before rules: %+v", a)
		}
		if !strings.Contains(a.body, "rules watch: ") {
			return fmt.Errorf("no reason yet: %q", a.body)
		}
		return nil
	})
	for _, r := range [][2]string{{"GET", "/h"}, {"POST", "/closed"}, {"GET", "/no/rule"}} {
		if a := gw.do(t, r[0], r[1], "ak_1"); a.status != http.StatusServiceUnavailable || a.retryAfter != "1" || !strings.Contains(a.body, "not ready") {
			t.Errorf("%s %s before rules: %+v, want 503 not ready with Retry-After 1", r[0], r[1], a)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("%d requests reached the upstream before the rules", n)
	}

	gt.set(true)
	testwait.For(t, 20*time.Second, "/readyz 200", func() error {
		if a := gw.do(t, "GET", "/readyz", ""); a.status != http.StatusOK || a.body != fmt.Sprintf("ready: rules version %d from the cluster", v) {
			return fmt.Errorf("%+v", a)
		}
		return nil
	})
	for i, want := range []string{"2", "1", "0"} {
		if a := gw.do(t, "GET", "/h", "ak_1"); a.status != http.StatusOK || a.remaining != want || a.body != "upstream" {
			t.Fatalf("with rules, request %d: %+v; want 200 from the upstream, %s remaining", i+1, a, want)
		}
	}
	if a := gw.do(t, "GET", "/h", "ak_1"); a.status != http.StatusTooManyRequests || a.retryAfter == "" {
		t.Fatalf("over the limit: %+v, want 429", a)
	}
	testwait.For(t, 10*time.Second, "the rules cache", func() error {
		b, err := os.ReadFile(cache)
		if err != nil {
			return err
		}
		var f struct{ Version uint64 }
		if err := json.Unmarshal(b, &f); err != nil || f.Version != v {
			return fmt.Errorf("version %d (%v)", f.Version, err)
		}
		return nil
	})
	gw.stop()

	// The cluster unreachable at start: the cache of the earlier run.
	gt.set(false)
	before := reached.Load()
	gw = startGatewayCLI(t, args...) // default policy
	if a := gw.do(t, "GET", "/readyz", ""); a.status != http.StatusOK ||
		!strings.HasPrefix(a.body, fmt.Sprintf("ready: rules version %d from the rules cache", v)) {
		t.Errorf("/readyz with the cache: %+v", a)
	}
	for i := 0; i < 3; i++ {
		if a := gw.do(t, "POST", "/closed", "ak_2"); a.status != http.StatusServiceUnavailable || a.retryAfter != "1" ||
			!strings.Contains(a.body, "rate limiter unavailable") {
			t.Errorf("fail_mode closed from the cache, request %d: %+v, want 503", i+1, a)
		}
	}
	if a := gw.do(t, "GET", "/no/rule", "ak_2"); a.status != http.StatusOK || a.body != "upstream" {
		t.Errorf("no rule matches: %+v, want the upstream's 200", a)
	}
	if n := reached.Load() - before; n != 1 {
		t.Errorf("%d requests reached the upstream, want 1", n)
	}
	if s := gw.stderr.String(); !strings.Contains(s, "rule set loaded from the rules cache") || !strings.Contains(s, "until_rules=wait") {
		t.Errorf("stderr:\n%s", s)
	}
}
