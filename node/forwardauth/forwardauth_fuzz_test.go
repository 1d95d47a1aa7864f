package forwardauth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// recorder stands in for the node: it keeps the items it was asked and
// denies an item whose cost is over 5, allows the others.
type recorder struct {
	set   *rules.Set
	mu    sync.Mutex
	asked []limit.Item
}

func (b *recorder) Rules() *rules.Set { return b.set }

func (b *recorder) Check(_ context.Context, items []limit.Item, out []limit.Result) error {
	b.mu.Lock()
	b.asked = append(b.asked, items...)
	b.mu.Unlock()
	for i, it := range items {
		out[i] = limit.Result{Allowed: it.Cost <= 5, Remaining: 5 - min(it.Cost, 5), Limit: 5, Window: time.Minute, Reset: time.Second}
		if !out[i].Allowed {
			out[i].RetryAfter = time.Second
		}
	}
	return nil
}

func (b *recorder) take() []limit.Item {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.asked
	b.asked = nil
	return a
}

// headerSafe: what net/http's server would let through as a header
// value or query (no line breaks, no NUL).
func headerSafe(s ...string) bool {
	for _, v := range s {
		if strings.ContainsAny(v, "\r\n\x00") {
			return false
		}
	}
	return true
}

const fuzzRules = `rules:
  - {id: orders, match: {route: /v1/orders, method: GET}, key: apikey, rate: 3, period: 1h}
  - {id: per-ip, match: {route: "/v1/ip/{id}"}, key: ip, rate: 2, period: 1h, fail_mode: closed}
  - {id: shadowed, match: {route: /v1/shadow}, key: global, rate: 1, period: 1h, shadow: true}
  - {id: tenant, match: {route: "/v1/*", method: POST}, key: "header:X-Tenant", rate: 10, period: 1m, cost_header: X-Cost}
  - {id: pro, match: {route: "/v1/*", method: GET, plan: pro}, key: user, rate: 10, period: 1m}
`

// FuzzForwardAuth sends outside forwarding headers to the forward-auth
// endpoint. Whatever they say: no panic; 400 asks the node nothing; every
// item asked is valid and in one all-or-nothing group; the answer is 200,
// 400, 429 or 503 (403 instead of the last two with deny_status=403),
// with header values free of line breaks and a bounded body.
func FuzzForwardAuth(f *testing.F) {
	rs, err := rules.ParseFile([]byte(fuzzRules))
	if err != nil {
		f.Fatal(err)
	}
	b := &recorder{set: rules.NewSet(1, rs, nil)}
	h, err := New(Config{}, b)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("GET", "/v1/orders?page=2", "203.0.113.1", "", "ak_1", "", "", "")
	f.Add("POST", "/v1/things", "", "10.0.0.1, 203.0.113.2", "", "acme", "7", "403")
	f.Add("GET", "/v1/ip/9", "", "", "", "", "", "429")
	f.Add("PUT", "nope", "", "", "", "", "", "")
	f.Add("POST", "/v1/x", "", "", "", "t", "-1", "")
	f.Add("GET", "/v1/shadow", "", "", "", "", "", "500")
	f.Fuzz(func(t *testing.T, method, uri, realIP, xff, apiKey, tenant, cost, deny string) {
		if !headerSafe(method, uri, realIP, xff, apiKey, tenant, cost) {
			return
		}
		req := httptest.NewRequest(http.MethodGet, Path+"?deny_status="+url.QueryEscape(deny), nil)
		for name, v := range map[string]string{"X-Original-Method": method, "X-Original-URI": uri, "X-Real-IP": realIP,
			"X-Forwarded-For": xff, "X-API-Key": apiKey, "X-Tenant": tenant, "X-Cost": cost, "X-User-ID": apiKey, "X-Plan": tenant} {
			if v != "" {
				req.Header.Set(name, v)
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		asked := b.take()
		want := map[int]bool{200: true, 400: true, 429: deny != "403", 503: deny != "403", 403: deny == "403"}
		if !want[rec.Code] {
			t.Fatalf("%s %q (deny_status %q): %d %s", method, uri, deny, rec.Code, rec.Body)
		}
		if rec.Code == http.StatusBadRequest && len(asked) > 0 {
			t.Fatalf("%s %q: 400 (%s), but the node was asked %+v", method, uri, rec.Body, asked)
		}
		for _, it := range asked {
			if err := limit.ValidateItem(it.Key, it.Rule, it.Cost); err != nil || it.Group != 1 {
				t.Fatalf("%s %q: the node was asked %+v (%v)", method, uri, it, err)
			}
		}
		for name, vs := range rec.Header() {
			for _, v := range vs {
				if !headerSafe(name, v) {
					t.Fatalf("answer header %q: %q", name, v)
				}
			}
		}
		if max := 8*maxURI + 4<<10; rec.Body.Len() > max {
			t.Fatalf("a %d-byte answer (over %d)", rec.Body.Len(), max)
		}
	})
}
