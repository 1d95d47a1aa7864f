package test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
)

// TestCaddyForwardAuth runs Debian's caddy on loopback with the shipped
// deploy/caddy/Caddyfile (addresses substituted, the admin endpoint off)
// in front of an upstream, asking a 3-node Weir cluster: 200 with the
// rate-limit fields until the limit, then 429 with Retry-After and the
// fields, and the upstream never sees a denied request.
func TestCaddyForwardAuth(t *testing.T) {
	bin, err := exec.LookPath("caddy")
	if err != nil {
		t.Skip("caddy not installed (apt-get install -y caddy; .ci/run installs it): skipping the Caddy forward-auth test")
	}
	conf, err := os.ReadFile("../deploy/caddy/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, 3)
	c.ApplyRules(`rules:
  - id: api.per-ip
    match: {route: /v1/*}
    key: ip
    rate: 3
    period: 1h
`)
	var hits atomic.Int64
	var forged atomic.Value // a client's own X-RateLimit-Limit, as the upstream saw it
	forged.Store("")
	var placeholders atomic.Int64 // request fields the upstream saw as Caddy's unreplaced placeholders
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		for _, vs := range r.Header {
			for _, v := range vs {
				if strings.HasPrefix(v, "{http.") {
					placeholders.Add(1)
				}
			}
		}
		if r.URL.Query().Get("forged") != "" {
			forged.Store(r.Header.Get("X-RateLimit-Limit"))
		}
		fmt.Fprintf(w, "upstream %s\n", r.URL.Path)
	}))
	defer up.Close()

	listen := freeLoopbackAddr(t)
	var nodes []string
	for _, n := range c.Live() {
		nodes = append(nodes, n.HTTPAddr())
	}
	site := string(conf)
	for _, r := range [][2]string{
		{"http://127.0.0.1:8000 {", "http://" + listen + " {"},
		{"forward_auth 127.0.0.1:8080 {", "forward_auth " + strings.Join(nodes, " ") + " {"},
		{"reverse_proxy 127.0.0.1:9000", "reverse_proxy " + strings.TrimPrefix(up.URL, "http://")},
	} {
		if !strings.Contains(site, r[0]) {
			t.Fatalf("deploy/caddy/Caddyfile no longer says %q: update the test", r[0])
		}
		site = strings.Replace(site, r[0], r[1], 1)
	}
	dir := t.TempDir()
	// The admin endpoint (a fixed port, 2019) stays off, so tests can run
	// side by side.
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte("{\n\tadmin off\n}\n\n"+site), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "caddy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	// Caddy keeps state (certificates, autosave) under HOME and XDG
	// directories: the test's own.
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopOnCleanup(t, cmd, "caddy", logf.Name())
	get := func(path string, h http.Header) (*http.Response, string, error) {
		req, err := http.NewRequest(http.MethodGet, "http://"+listen+path, nil)
		if err != nil {
			return nil, "", err
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b), nil
	}
	testwait.For(t, 15*time.Second, "caddy to serve", func() error {
		_, _, err := get("/health", nil)
		return err
	})
	hits.Store(0)

	checkForwardAuthLimit(t, func(path string) (*http.Response, string, error) { return get(path, nil) }, &hits, "", func(h http.Header) error {
		if _, ok := h["Ratelimit-Limit"]; ok { // the draft family: not in the default style
			return fmt.Errorf("a field Weir did not send")
		}
		return nil
	})
	// A client cannot pick its key or its route with the headers Weir
	// reads first: still limited.
	for _, forged := range []http.Header{
		{"X-Real-Ip": {"10.9.9.9"}, "X-Forwarded-For": {"10.9.9.8"}},
		{"X-Original-Uri": {"/health"}},
	} {
		resp, _, err := get("/v1/orders", forged)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a request with %v: %v %v", forged, err, resp)
		}
	}
	if n := hits.Load(); n != 3 {
		t.Fatalf("the upstream saw %d requests; want the 3 allowed", n)
	}
	// A route no rule matches passes without fields, and a client's own
	// fields reach neither the upstream nor the answer.
	resp, _, err := get("/health?forged=1", http.Header{"X-Ratelimit-Limit": {"999"}})
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("/health: %v %v", err, resp)
	}
	if v := forged.Load().(string); v != "" {
		t.Fatalf("the upstream saw X-RateLimit-Limit %q; want none", v)
	}
	if n := placeholders.Load(); n != 0 {
		t.Fatalf("the upstream saw %d fields holding Caddy's unreplaced placeholders", n)
	}
}

// stopOnCleanup stops a proxy the test started (SIGTERM: nginx's master
// stops its workers first; Kill after 10 s) and, when the test failed,
// logs the proxy's log file.
func stopOnCleanup(t *testing.T, cmd *exec.Cmd, name, logPath string) {
	t.Helper()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("%s log:\n%s", name, b)
			}
		}
	})
}

// checkForwardAuthLimit sends 5 requests through a proxy in front of the
// rule api.per-ip (3 per hour): 3 reach the upstream with 200 and the
// rate-limit fields counting down, 2 are answered 429 with Retry-After and
// the fields and a body holding denied. allowed checks more of an allowed
// answer's fields.
func checkForwardAuthLimit(t *testing.T, get func(path string) (*http.Response, string, error), hits *atomic.Int64, denied string, allowed func(http.Header) error) {
	t.Helper()
	for i := 1; i <= 5; i++ {
		resp, body, err := get(fmt.Sprintf("/v1/orders?n=%d", i))
		if err != nil {
			t.Fatal(err)
		}
		h := resp.Header
		if i <= 3 {
			if resp.StatusCode != http.StatusOK || body != "upstream /v1/orders\n" {
				t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
			}
			if h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != fmt.Sprint(3-i) ||
				h.Get("RateLimit-Policy") != `"api.per-ip";q=3;w=3600` || h.Get("Retry-After") != "" {
				t.Fatalf("request %d: headers %v", i, h)
			}
			if err := allowed(h); err != nil {
				t.Fatalf("request %d: %v: headers %v", i, err, h)
			}
			continue
		}
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, denied) {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if h.Get("Retry-After") == "" || h.Get("Retry-After") == "0" || h.Get("X-RateLimit-Remaining") != "0" ||
			h.Get("X-RateLimit-Limit") != "3" || !strings.HasPrefix(h.Get("RateLimit"), `"api.per-ip";r=0;t=`) {
			t.Fatalf("request %d: headers %v", i, h)
		}
	}
	if n := hits.Load(); n != 3 {
		t.Fatalf("the upstream saw %d requests; want the 3 allowed", n)
	}
}
