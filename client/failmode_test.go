package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirlimit/weir/internal/testwait"
)

// TestFailModesLinkCutAndRestored cuts every connection of one gateway
// (a black hole: the nodes are unreachable, nothing fails fast) and
// restores it. Open rules pass at the gateway's share, closed rules answer
// 503 with Retry-After, and once the breaker is open no decision waits for
// the timeout; after the link returns both come from the cluster again.
// The gateway's clock is fake, so the breaker stays open until the test
// moves it.
func TestFailModesLinkCutAndRestored(t *testing.T) {
	clk, lk, reg := newFakeClock(), newLink(), prometheus.NewRegistry()
	const cooldown = time.Minute
	c, gw := startWith(t, func(cfg *Config) {
		cfg.Now, cfg.Dial, cfg.Registry = clk.Now, lk.Dial, reg
		cfg.BreakerFailures, cfg.BreakerCooldown = 3, cooldown
	})
	newTestClient(t, c, "gw2", nil) // a second gateway: shares are halves
	testwait.For(t, 10*time.Second, "the cluster to report 2 gateways", func() error {
		if g := gw.Gateways(); g != 2 {
			return fmt.Errorf("gateways %d", g)
		}
		return nil
	})
	ctx := context.Background()
	closedReq := Request{Route: "/closed", Method: "GET", APIKey: "ak_c"}
	openReq := Request{Route: "/open", Method: "GET", APIKey: "ak_o"}
	fromCluster := func(r Request) func() error {
		return func() error {
			clk.Advance(cooldown) // let a probe through if a slow answer opened the breaker
			d := gw.Decide(ctx, r)
			if len(d.Limits) != 1 || d.Limits[0].Fallback || !d.Allowed {
				return fmt.Errorf("not from the cluster yet: %+v", d)
			}
			return nil
		}
	}
	testwait.For(t, 10*time.Second, "a closed-rule decision from the cluster", fromCluster(closedReq))

	lk.Cut()
	opens := gw.Stats().BreakerOpens
	// Until the breaker opens, closed-rule decisions wait for the timeout
	// and deny.
	for i := 0; i < 50 && gw.Stats().BreakerOpens == opens; i++ {
		d := gw.Decide(ctx, closedReq)
		if d.Allowed || d.Status != http.StatusServiceUnavailable || d.RetryAfter != time.Second || !d.Limits[0].Fallback {
			t.Fatalf("closed decision %d with the link cut: %+v", i+1, d)
		}
	}
	if got := gw.Stats().BreakerOpens; got != opens+1 {
		t.Fatalf("breaker opened %d times after the cut, want 1", got-opens)
	}
	if fallbackReasons(t, reg)["timeout"] == 0 {
		t.Errorf("no timeout counted before the breaker opened: %v", fallbackReasons(t, reg))
	}

	// Breaker open: closed rules deny at once, without an RPC or a timeout.
	s0, r0 := gw.Stats(), fallbackReasons(t, reg)
	const n = 20
	for i := 0; i < n; i++ {
		d := gw.Decide(ctx, closedReq)
		if d.Allowed || d.Status != http.StatusServiceUnavailable || d.RetryAfter != time.Second || !d.Limits[0].Fallback {
			t.Fatalf("closed decision %d with the breaker open: %+v", i+1, d)
		}
	}
	s1, r1 := gw.Stats(), fallbackReasons(t, reg)
	if s1.BreakerRejects-s0.BreakerRejects != n || s1.RPCs != s0.RPCs {
		t.Errorf("breaker open: %d rejects and %d RPCs for %d decisions; want %d and 0",
			s1.BreakerRejects-s0.BreakerRejects, s1.RPCs-s0.RPCs, n, n)
	}
	if r1["timeout"] != r0["timeout"] || r1["breaker_open"]-r0["breaker_open"] != n {
		t.Errorf("breaker open: fallback reasons went from %v to %v; want %d more breaker_open and no timeout", r0, r1, n)
	}
	// The same through HTTP: 503, Retry-After 1, a JSON body.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/closed", nil)
	req.Header.Set("X-API-Key", "ak_c")
	gw.Middleware()(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a fail-closed request reached the handler")
	})).ServeHTTP(rec, req)
	var body struct {
		Error        string `json:"error"`
		RetryAfterMs int64  `json:"retry_after_ms"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusServiceUnavailable ||
		rec.Header().Get("Retry-After") != "1" || body.RetryAfterMs != 1000 || body.Error == "" {
		t.Errorf("HTTP with the breaker open: %d %v %q (%v)", rec.Code, rec.Header(), rec.Body, err)
	}

	// Open rule: this gateway's share of burst 4 with 2 gateways is 2.
	allowed := 0
	for i := 0; i < 6; i++ {
		d := gw.Decide(ctx, openReq)
		l := d.Limits[0]
		if !l.Fallback || l.Limit != 2 {
			t.Errorf("open decision %d: %+v, want a fallback with limit 2", i+1, l)
		}
		if d.Allowed {
			allowed++
		} else if d.Status != http.StatusTooManyRequests || d.RetryAfter <= 0 {
			t.Errorf("open decision %d denied oddly: %+v", i+1, d)
		}
	}
	if allowed != 2 {
		t.Errorf("fail-open allowed %d of 6, want the share 4/2 = 2", allowed)
	}
	if got := gw.Stats().RPCs; got != s0.RPCs {
		t.Errorf("%d RPCs while the breaker was open", got-s0.RPCs)
	}

	// Link back: both rules are decided by the cluster again. ak_o was
	// never charged on the cluster, so it has 3 of 4 left after one.
	lk.Restore()
	testwait.For(t, 20*time.Second, "closed-rule decisions from the cluster after the link returned", fromCluster(closedReq))
	tries := 0
	var last Decision
	testwait.For(t, 20*time.Second, "open-rule decisions from the cluster after the link returned", func() error {
		tries++
		clk.Advance(cooldown)
		last = gw.Decide(ctx, openReq)
		if last.Limits[0].Fallback {
			return fmt.Errorf("still a fallback: %+v", last)
		}
		return nil
	})
	// An earlier try that timed out may have been charged on the cluster.
	if l := last.Limits[0]; !last.Allowed || l.Limit != 4 || l.Remaining > 3 || l.Remaining < int64(4-tries) {
		t.Errorf("open rule after recovery (try %d): %+v, want allowed with 3 of 4 left", tries, l)
	}
	t.Logf("stats %+v, fallbacks by reason %v", gw.Stats(), fallbackReasons(t, reg))
}
