package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
)

const costRules = `
rules:
  - id: bulk
    match: {route: /export, method: GET}
    key: apikey
    rate: 1
    period: 1h
    burst: 120
    cost: 50
    timeout: 2s
  - id: metered
    match: {route: /metered}
    key: apikey
    rate: 1
    period: 1h
    burst: 10
    cost_header: X-Weir-Cost
    timeout: 2s
  - id: leasedcost
    match: {route: /lc}
    key: apikey
    rate: 1
    period: 59m # under an hour: longer windows are never leased
    burst: 100
    lease: 20
    cost_header: X-Weir-Cost
    timeout: 2s
`

// TestRequestCostAtTheGateway: a rule's cost (bulk export = 50) and a cost
// header are what the middleware takes; a bad cost header is 400 and takes
// nothing; a lease serves a cost above 1 and the total stays within the
// burst.
func TestRequestCostAtTheGateway(t *testing.T) {
	c := testcluster.New(t, 1)
	v := c.ApplyRules(costRules)
	cl := newTestClient(t, c, "gw-cost", nil)
	testwait.For(t, 10*time.Second, "the rules", func() error {
		if got := cl.RulesVersion(); got < v {
			return fmt.Errorf("version %d, want %d", got, v)
		}
		return nil
	})
	var reached atomic.Int64
	srv := httptest.NewServer(cl.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, "ok")
	})))
	defer srv.Close()
	do := func(path, key, cost string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("X-API-Key", key)
		if cost != "" {
			req.Header.Set("X-Weir-Cost", cost)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), strings.TrimSpace(string(b))
	}

	for i, want := range []struct {
		code      int
		remaining string
	}{{200, "70"}, {200, "20"}, {429, "20"}} {
		if code, rem, _ := do("/export", "ak_1", ""); code != want.code || rem != want.remaining {
			t.Fatalf("export %d: %d with %s remaining, want %d with %s", i+1, code, rem, want.code, want.remaining)
		}
	}

	before := reached.Load()
	for _, bad := range []string{"abc", "0", "-3", "1.5", "1000001"} {
		if code, _, body := do("/metered", "ak_2", bad); code != http.StatusBadRequest || !strings.Contains(body, "X-Weir-Cost") {
			t.Errorf("cost header %q: %d %q, want 400 naming the header", bad, code, body)
		}
	}
	if n := reached.Load() - before; n != 0 {
		t.Errorf("%d requests with a bad cost reached the upstream", n)
	}
	steps := []struct {
		cost, remaining string
		code            int
	}{{"4", "6", 200}, {"7", "6", 429}, {"6", "0", 200}}
	for _, s := range steps {
		if code, rem, _ := do("/metered", "ak_2", s.cost); code != s.code || rem != s.remaining {
			t.Fatalf("cost %s: %d with %s remaining, want %d with %s (a bad header took nothing)", s.cost, code, rem, s.code, s.remaining)
		}
	}

	h := http.Header{}
	h.Set("X-Weir-Cost", "5")
	admitted := 0
	for range 25 {
		if d := cl.Decide(context.Background(), Request{Route: "/lc", Method: "GET", APIKey: "ak_3", Header: h}); d.Allowed {
			admitted++
		}
	}
	if admitted != 20 {
		t.Errorf("admitted %d requests of cost 5 from a burst of 100, want 20", admitted)
	}
	if hits := cl.Stats().LeaseHits; hits < 10 {
		t.Errorf("%d decisions of cost 5 served from a lease of 20, want most of them", hits)
	}
}
