package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The gateway targets drive HTTP requests through real `weir gateway`
// processes (one per simulated gateway) to an upstream, as an API's
// clients reach it: `gateway` on the rule's route (one check per request,
// 200 allowed, 429 denied), `proxy` on a route no rule matches (the same
// processes proxying without a check). The difference between the two is
// the check's cost in a real proxy. `plainproxy` drives the same requests
// through `weir plainproxy` processes (net/http/httputil's ReverseProxy
// with a transport keeping many idle connections per host, nothing of
// Weir's): the baseline both are compared with.

// Upstream is the API behind the gateways: it answers every request 200.
type Upstream struct {
	Addr string
	srv  *http.Server
	done chan struct{}
}

// StartUpstream serves the upstream on a free loopback port.
func StartUpstream() (*Upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &Upstream{Addr: ln.Addr().String(), done: make(chan struct{}),
		srv: &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok\n")
		})}}
	go func() { defer close(u.done); _ = u.srv.Serve(ln) }()
	return u, nil
}

// Close stops the upstream.
func (u *Upstream) Close() {
	_ = u.srv.Close()
	<-u.done
}

// GatewayOptions describe the `weir gateway` processes a GatewayFactory
// starts.
type GatewayOptions struct {
	Bin      string   // the weir binary
	Seeds    []string // the cluster's gRPC addresses
	Upstream string   // host:port
	Prefix   string   // gateway ids are Prefix-<i>
	Conns    int      // keep-alive connections per gateway (its callers)
	Check    bool     // requests match the rule (gateway); else no rule (proxy)
	Plain    bool     // start `weir plainproxy` instead (no cluster, no check)
	Log      io.Writer
}

// GatewayFactory returns a Factory that starts one `weir gateway` process
// per simulated gateway and waits until it holds the rules (with o.Plain,
// one `weir plainproxy` process, ready once it proxies a request).
func GatewayFactory(ctx context.Context, o GatewayOptions) Factory {
	return func(i int) (Target, error) {
		listen, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSpawn, err)
		}
		args := []string{"gateway", "--listen", listen, "--upstream", "http://" + o.Upstream,
			"--cluster", strings.Join(o.Seeds, ","), "--id", fmt.Sprintf("%s-%d", o.Prefix, i), "--until-rules", "wait"}
		if o.Plain {
			args = []string{"plainproxy", "--listen", listen, "--upstream", "http://" + o.Upstream}
		}
		cmd := exec.Command(o.Bin, args...)
		cmd.Env = os.Environ()
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("%w: %s gateway: %v", ErrSpawn, o.Bin, err)
		}
		g := &gatewayTarget{cmd: cmd, done: make(chan struct{}), base: "http://" + listen, check: o.Check, plain: o.Plain}
		go func() { _ = cmd.Wait(); close(g.done) }()
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = max(o.Conns, 1), max(o.Conns, 1)
		g.hc = &http.Client{Transport: tr}
		err = poll(ctx, 30*time.Second, func() error {
			select {
			case <-g.done:
				return fmt.Errorf("weir %s exited", args[0])
			default:
			}
			return httpOK(ctx, nil, http.MethodGet, "/readyz", listen, "") // the plain proxy's upstream answers it
		})
		if err != nil {
			_ = g.Close()
			return nil, fmt.Errorf("%w: gateway %d: %v", ErrSpawn, i, err)
		}
		return g, nil
	}
}

// gatewayTarget is one simulated gateway: a `weir gateway` process.
type gatewayTarget struct {
	cmd   *exec.Cmd
	done  chan struct{}
	base  string
	check bool
	plain bool // a `weir plainproxy`
	hc    *http.Client
}

var _ Target = (*gatewayTarget)(nil)

// PID names the gateway's process for the CPU accounting.
func (g *gatewayTarget) PID() (string, int) {
	if g.plain {
		return "proxy processes", g.cmd.Process.Pid
	}
	return "gateway processes", g.cmd.Process.Pid
}

// Check sends GET /bench/<rule> (the rule's route; /nocheck/<rule> for the
// proxy target) with the key's API key in X-API-Key.
func (g *gatewayTarget) Check(ctx context.Context, key, rule string, _ int64) (bool, error) {
	path := "/bench/"
	if !g.check {
		path = "/nocheck/"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.base+path+rule, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("X-API-Key", strings.TrimPrefix(key, "apikey:"))
	resp, err := g.hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("bench: gateway: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body) // read to the end: the connection is reused
	if err != nil {
		return false, fmt.Errorf("bench: gateway: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusTooManyRequests:
		return false, nil
	}
	return false, fmt.Errorf("%w: gateway %d %s", ErrUndecided, resp.StatusCode, strings.TrimSpace(string(b)))
}

// Close stops the gateway process.
func (g *gatewayTarget) Close() error {
	g.hc.CloseIdleConnections()
	_ = g.cmd.Process.Signal(os.Interrupt)
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
	return nil
}
