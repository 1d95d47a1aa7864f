package test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/internal/testwait"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

const reserveRules = `
rules:
  - id: search
    match: {route: /v1/search, method: GET}
    key: global
    rate: 100
    period: 1h
    burst: 100
    priority_header: X-Priority
    priority_default: bulk
    reserve: {critical: 20%}
    timeout: 2s
    fail_mode: closed
`

// At overload (bulk requests flooding a bucket that does not refill within
// the test), critical requests up to their 20% share are all admitted,
// whenever they come, while bulk gets at most the other 80% and is
// refused as shed (the reserve), not as over its limit. No refill makes
// the counts exact, whatever the machine's pace.
func TestReserveKeepsCriticalShare(t *testing.T) {
	c := newCluster(t, 1)
	c.ApplyRules(reserveRules)
	cl := c.limiter(c.Nodes[0])
	check := func(class string) *weirv1.CheckResult {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cl.Check(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "global:global", Rule: "search", Cost: 1, Priority: class}}})
		if err != nil || resp.Results[0].ErrorCode != 0 {
			t.Errorf("check: %v %v", err, resp)
			return &weirv1.CheckResult{}
		}
		return resp.Results[0]
	}
	stop := make(chan struct{})
	var bulkOK, bulkShed, bulkLimited atomic.Int64
	var wg sync.WaitGroup
	for range 8 { // bulk: closed loop until stopped
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch r := check(""); { // no header: priority_default, bulk
				case r.Allowed:
					bulkOK.Add(1)
				case r.Shed:
					bulkShed.Add(1)
				default:
					bulkLimited.Add(1)
				}
			}
		}()
	}
	// Critical: its 20 requests, half while bulk still takes tokens, half
	// once bulk is being shed.
	critOK := 0
	testwait.For(t, 10*time.Second, "bulk admitted", func() error {
		if bulkOK.Load() == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	for range 10 {
		if check("critical").Allowed {
			critOK++
		}
	}
	testwait.For(t, 10*time.Second, "bulk shed", func() error {
		if bulkShed.Load() == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	for range 10 {
		if check("critical").Allowed {
			critOK++
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("critical %d of 20 admitted; bulk %d admitted, %d shed, %d limited", critOK, bulkOK.Load(), bulkShed.Load(), bulkLimited.Load())
	if critOK != 20 {
		t.Fatalf("critical: %d of its 20 admitted, want all (its share is kept by the reserve)", critOK)
	}
	if n := bulkOK.Load(); n > 80 {
		t.Fatalf("bulk admitted %d, over the 80%% the reserve leaves it", n)
	}
	if bulkLimited.Load() != 0 && bulkOK.Load()+20 < 100 {
		t.Fatalf("bulk was refused as over its limit (%d) while tokens were left for critical only: want shed", bulkLimited.Load())
	}
}

// Through the Go SDK middleware, a shed request is answered 503 with
// reason "shed"; a request over the rule's own limit 429.
func TestReserveShedIsNot429(t *testing.T) {
	c := newCluster(t, 1)
	v := c.ApplyRules(`
rules:
  - id: search
    match: {route: /v1/search, method: GET}
    key: global
    rate: 1
    period: 1h
    burst: 10
    priority_header: X-Priority
    reserve: {critical: 30%}
    timeout: 2s
`)
	cfg := client.DefaultConfig()
	cfg.Cluster, cfg.GatewayID = []string{c.Nodes[0].GRPCAddr()}, "gw"
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	testwait.Until(t, "the gateway to hold the rules", func() bool { return cl.RulesVersion() >= v })
	srv := httptest.NewServer(cl.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	t.Cleanup(srv.Close)
	get := func(class string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/search", nil)
		if class != "" {
			req.Header.Set("X-Priority", class)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Reason string `json:"reason"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Reason
	}
	// Burst 10, 30% (3 tokens) kept for critical: 7 default requests pass.
	for i := range 7 {
		if code, _ := get(""); code != http.StatusOK {
			t.Fatalf("default request %d: %d", i, code)
		}
	}
	if code, reason := get(""); code != http.StatusServiceUnavailable || reason != "shed" {
		t.Fatalf("default request over the reserve: %d %q, want 503 \"shed\"", code, reason)
	}
	for i := range 3 {
		if code, _ := get("critical"); code != http.StatusOK {
			t.Fatalf("critical request %d of the reserve: %d", i, code)
		}
	}
	if code, reason := get("critical"); code != http.StatusTooManyRequests || reason == "shed" {
		t.Fatalf("critical request over the limit: %d %q, want 429", code, reason)
	}
	if code, reason := get(""); code != http.StatusTooManyRequests || reason == "shed" {
		t.Fatalf("default request with the bucket empty: %d %q, want 429 (its own limit, not shed)", code, reason)
	}
}
