package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/weirlimit/weir/internal/testlog"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/internal/tracing"
)

// proxyGateway starts `weir gateway` in front of up with no cluster
// reachable and --until-rules allow, so every request is proxied: what is
// measured is the proxy alone.
func proxyGateway(t *testing.T, up string, args ...string) *runningGateway {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // nothing listens there: the cluster is unreachable
	return startGatewayCLI(t, append([]string{"--upstream", up, "--cluster", dead, "--until-rules", "allow", "--id", "gw-proxy"}, args...)...)
}

// TestGatewayReusesUpstreamConnections: 16 concurrent callers making 40
// requests each through the gateway open at most 16 connections to the
// upstream (Go's default transport keeps 2 idle per host, so it opened
// hundreds and left them in TIME_WAIT).
func TestGatewayReusesUpstreamConnections(t *testing.T) {
	var opened atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(time.Millisecond) // keep requests overlapping
		_, _ = io.WriteString(w, "upstream")
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	gw := proxyGateway(t, up.URL)

	const callers, each = 16, 40
	tr := &http.Transport{MaxIdleConnsPerHost: callers}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				resp, err := hc.Get(gw.url + "/any")
				if err != nil {
					failed.Add(1)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(b) != "upstream" {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed", n, callers*each)
	}
	// One connection per caller, give or take a request that dials while
	// another's connection is on its way back to the pool (seen under
	// -race on a loaded machine); Go's default of 2 idle opened 342.
	if n := opened.Load(); n > 2*callers {
		t.Errorf("the gateway opened %d connections to the upstream for %d requests from %d callers; want at most %d", n, callers*each, callers, 2*callers)
	}
}

// TestGatewayUpstreamH2C: with --upstream-h2c the gateway speaks HTTP/2
// without TLS to an upstream that accepts it; without it, HTTP/1.1.
func TestGatewayUpstreamH2C(t *testing.T) {
	var proto atomic.Value
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Proto)
		_, _ = io.WriteString(w, "upstream")
	}))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	up.Config.Protocols = &p
	up.Start()
	defer up.Close()

	for _, tc := range []struct {
		args []string
		want string
	}{{nil, "HTTP/1.1"}, {[]string{"--upstream-h2c"}, "HTTP/2.0"}} {
		gw := proxyGateway(t, up.URL, tc.args...)
		if a := gw.do(t, "GET", "/x", ""); a.status != http.StatusOK || a.body != "upstream" {
			t.Fatalf("%v: %+v", tc.args, a)
		}
		if got := proto.Load(); got != tc.want {
			t.Errorf("%v: the upstream saw %v, want %s", tc.args, got, tc.want)
		}
		gw.stop()
	}
}

// TestGatewayStreamsResponses: a response the upstream writes in parts
// reaches the client part by part, not once the upstream is done.
func TestGatewayStreamsResponses(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		_, _ = io.WriteString(w, "data: second\n\n")
	}))
	defer up.Close()
	defer close(release)
	gw := proxyGateway(t, up.URL)

	resp, err := http.Get(gw.url + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(resp.Body).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if strings.TrimSpace(l) != "data: first" {
			t.Errorf("first line %q", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event did not arrive while the upstream held the rest")
	}
}

func TestGatewayUpstreamFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--upstream-idle-conns", "-1"},
		{"--upstream-max-conns", "-2"},
		{"--upstream-idle-timeout", "0s"},
		{"--upstream-dial-timeout", "-1s"},
		{"--upstream-response-timeout", "-1s"},
	} {
		var out, errb testlog.Buffer
		code := run(t.Context(), append([]string{"gateway", "--upstream", "http://127.0.0.1:1", "--cluster", "127.0.0.1:1"}, args...),
			strings.NewReader(""), &out, &errb, func(string) string { return "" })
		if code == exitOK || !strings.Contains(errb.String(), args[0]) {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming %s", args, code, errb.String(), args[0])
		}
	}
}

// TestGatewayPooledCopyBuffers: responses larger than a copy buffer come
// through whole and unmixed while 8 callers share the pool, and the pool
// lends 32 KiB buffers and keeps no other size.
func TestGatewayPooledCopyBuffers(t *testing.T) {
	body := func(path string) string { return strings.Repeat(path, 100<<10/len(path)) }
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, body(r.URL.Path))
	}))
	defer up.Close()
	gw := proxyGateway(t, up.URL)
	var wg sync.WaitGroup
	errs := make(chan string, 8*10)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				path := "/p" + strings.Repeat("x", i) + strings.Repeat("y", j)
				resp, err := http.Get(gw.url + path)
				if err != nil {
					errs <- err.Error()
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != body(path) {
					errs <- path + ": body differs"
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	var p bufferPool
	b := p.Get()
	if len(b) != copyBufferSize {
		t.Fatalf("Get: %d bytes, want %d", len(b), copyBufferSize)
	}
	p.Put(make([]byte, 100))
	p.Put(b[:10])
	if got := p.Get(); len(got) != copyBufferSize {
		t.Fatalf("Get after Put: %d bytes, want %d", len(got), copyBufferSize)
	}
}

// TestGatewayPlainProxyBaseline: the hidden `weir plainproxy` (the bench's
// baseline) proxies to its upstream, with and without pooled buffers, and
// stops cleanly.
func TestGatewayPlainProxyBaseline(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "upstream "+r.URL.Path)
	}))
	defer up.Close()
	for _, extra := range [][]string{nil, {"--buffer-pool"}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		ctx, cancel := context.WithCancel(context.Background())
		var out, errb testlog.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, append([]string{"plainproxy", "--listen", addr, "--upstream", up.URL}, extra...),
				strings.NewReader(""), &out, &errb, func(string) string { return "" })
		}()
		var got string
		testwait.For(t, 10*time.Second, "weir plainproxy to answer", func() error {
			resp, err := http.Get("http://" + addr + "/x")
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got = string(b)
			return nil
		})
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("plainproxy %v exited %d: %s", extra, code, errb.String())
		}
		if got != "upstream /x" {
			t.Errorf("plainproxy %v answered %q", extra, got)
		}
	}
}

// TestGatewayForwardsItsOwnTraceContext: with tracing on, the gateway
// starts a span that is the child of the caller's W3C traceparent and
// sends the upstream its own context (same trace, the gateway's span);
// with tracing off it passes the caller's traceparent on unchanged.
func TestGatewayForwardsItsOwnTraceContext(t *testing.T) {
	got := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
	}))
	t.Cleanup(up.Close)
	// A collector that takes no spans: exporting fails at once, off the
	// request path.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	collector := grpc.NewServer()
	go func() { _ = collector.Serve(ln) }()
	t.Cleanup(collector.Stop)

	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	caller := "00-" + traceID + "-" + callerSpan + "-01"
	forwarded := func(gw *runningGateway) string {
		t.Helper()
		req, _ := http.NewRequest("GET", gw.url+"/any", nil)
		req.Header.Set("traceparent", caller)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return <-got
	}

	if tp := forwarded(proxyGateway(t, up.URL)); tp != caller {
		t.Errorf("tracing off: upstream got traceparent %q, want the caller's %q", tp, caller)
	}
	tp := forwarded(proxyGateway(t, up.URL, "--otlp-endpoint", "http://"+ln.Addr().String(), "--trace-ratio", "0"))
	sc := tracing.Parse(tp)
	switch {
	case !sc.IsValid():
		t.Fatalf("tracing on: upstream got traceparent %q, not a valid one", tp)
	case sc.TraceID().String() != traceID || !sc.IsSampled():
		t.Errorf("tracing on: upstream got traceparent %q, want the caller's sampled trace %s", tp, traceID)
	case sc.SpanID().String() == callerSpan:
		t.Errorf("tracing on: upstream got the caller's span %s: the gateway forwarded the traceparent unchanged", callerSpan)
	}
}
