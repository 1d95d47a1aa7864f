package node_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // as cmd/weir embeds it

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node"
)

const calendarRules = `
rules:
  - id: plan.month
    match: {route: /cal/month}
    key: apikey
    algorithm: fixed_window
    rate: 3
    calendar: month
    timezone: Europe/Berlin
  - id: plan.day
    match: {route: /cal/day}
    key: apikey
    algorithm: fixed_window
    rate: 2
    calendar: day
`

type checkAnswer struct {
	Allowed      bool  `json:"allowed"`
	Remaining    int64 `json:"remaining"`
	ResetMS      int64 `json:"reset_ms"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	WindowMS     int64 `json:"window_ms"`
}

// A monthly quota in Europe/Berlin and a daily one in UTC, through a real
// node's HTTP API on a fake clock: reset_ms and retry_after_ms point at
// the next local midnight (of the 1st: March 2026 ends in summer time, so
// at 22:00 UTC), GET /v1/limits gives reset_at in the rule's zone, and the
// quota is back at the boundary, not before.
func TestCalendarQuotasThroughHTTP(t *testing.T) {
	var clock atomic.Int64
	set := func(s string) {
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		clock.Store(ts.UnixNano())
	}
	set("2026-03-31T21:00:00Z") // 23:00 in Berlin
	c := testcluster.NewConfigured(t, 1, func(cfg *node.Config) { cfg.Now = clock.Load })
	c.ApplyRules(calendarRules)
	base := "http://" + c.Nodes[0].HTTPAddr()
	check := func(key, rule string) checkAnswer {
		t.Helper()
		var a checkAnswer
		code := postJSON(t, base+"/v1/limits/check", `{"key":"`+key+`","rule":"`+rule+`"}`, &a)
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Fatalf("check %s %s: %d", key, rule, code)
		}
		return a
	}

	for i := range 3 {
		if a := check("apikey:m", "plan.month"); !a.Allowed || a.ResetMS != 3_600_000 {
			t.Fatalf("take %d: %+v, want allowed with reset in 1h (April 1st, 00:00 Berlin)", i, a)
		}
	}
	a := check("apikey:m", "plan.month")
	if a.Allowed || a.RetryAfterMS != 3_600_000 || a.ResetMS != 3_600_000 || a.WindowMS != int64(30*24*time.Hour/time.Millisecond) {
		t.Fatalf("over the monthly quota: %+v, want retry and reset in 3,600,000 ms", a)
	}
	var lim struct {
		Limits []struct {
			Rule     string `json:"rule"`
			ResetAt  string `json:"reset_at"`
			Calendar string `json:"calendar"`
			Timezone string `json:"timezone"`
		} `json:"limits"`
	}
	if code := getJSON(t, base+"/v1/limits/apikey:m", &lim); code != http.StatusOK {
		t.Fatalf("GET /v1/limits: %d", code)
	}
	found := false
	for _, l := range lim.Limits {
		if l.Rule == "plan.month" {
			found = true
			if l.ResetAt != "2026-04-01T00:00:00.000+02:00" || l.Calendar != "month" || l.Timezone != "Europe/Berlin" {
				t.Fatalf("limits of plan.month: %+v, want reset_at 2026-04-01T00:00:00.000+02:00", l)
			}
		}
	}
	if !found {
		t.Fatalf("GET /v1/limits lists %+v", lim.Limits)
	}
	set("2026-03-31T21:59:59.999Z")
	if a := check("apikey:m", "plan.month"); a.Allowed || a.RetryAfterMS != 1 {
		t.Fatalf("a millisecond before local midnight: %+v", a)
	}
	set("2026-03-31T22:00:00Z")
	if a := check("apikey:m", "plan.month"); !a.Allowed || a.Remaining != 2 {
		t.Fatalf("at local midnight of April 1st: %+v, want a fresh month", a)
	}

	set("2026-12-01T18:00:00Z")
	check("apikey:d", "plan.day")
	check("apikey:d", "plan.day")
	if a := check("apikey:d", "plan.day"); a.Allowed || a.RetryAfterMS != 6*3_600_000 || a.ResetMS != 6*3_600_000 {
		t.Fatalf("over the daily quota at 18:00 UTC: %+v, want retry in 6h", a)
	}
	set("2026-12-02T00:00:00Z")
	if a := check("apikey:d", "plan.day"); !a.Allowed {
		t.Fatalf("at midnight UTC: %+v", a)
	}
}

// The owner grants no automatic lease on a long window (a period of an
// hour, a calendar day), however hot the key from however many gateways,
// while the same load on a one-minute window is leased; and a rule asking
// for a fixed lease on a long window is refused, changing nothing.
func TestLongWindowsAreNeverLeased(t *testing.T) {
	c := testcluster.NewConfigured(t, 1, func(cfg *node.Config) { cfg.AutoLeaseRate = 10 })
	c.ApplyRules(`
rules:
  - {id: short, match: {route: /short}, key: apikey, algorithm: fixed_window, rate: 100000, period: 1m}
  - {id: hourly, match: {route: /hourly}, key: apikey, algorithm: fixed_window, rate: 100000, period: 1h}
  - {id: daily, match: {route: /daily}, key: apikey, algorithm: fixed_window, rate: 100000, calendar: day}
`)
	nd := c.Nodes[0]
	granted := map[string]int64{}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; time.Now().Before(deadline) && (granted["short"] == 0 || i < 400); i++ {
		for _, rule := range []string{"short", "hourly", "daily"} {
			if rule == "short" && granted[rule] > 0 {
				continue // leased: its grants, never spent here, would empty it
			}
			items := []limit.Item{{Key: "apikey:hot", Rule: rule, Cost: 1, LeaseGateway: uint64(1 + i%3)}}
			res := make([]limit.Result, 1)
			if err := nd.Check(context.Background(), items, res); err != nil {
				t.Fatal(err)
			}
			if !res[0].Allowed {
				t.Fatalf("%s: %+v", rule, res[0])
			}
			granted[rule] += res[0].LeaseGranted
		}
		if i%20 == 19 {
			time.Sleep(5 * time.Millisecond) // let the rate estimate see time pass
		}
	}
	if granted["short"] == 0 {
		t.Fatalf("the one-minute window was never leased either (%v): the test proves nothing", granted)
	}
	if granted["hourly"] != 0 || granted["daily"] != 0 {
		t.Fatalf("long windows leased: %v", granted)
	}

	before := c.Nodes[0].Store().Current().Version
	for _, r := range []string{
		`{"id":"hourly.fixed","match":{"route":"/hf"},"key":"apikey","rate":1000,"period":"1h","lease":10}`,
		`{"id":"daily.fixed","match":{"route":"/df"},"key":"apikey","algorithm":"fixed_window","rate":1000,"calendar":"day","lease":10}`,
	} {
		id := r[strings.Index(r, `"id":"`)+6 : strings.Index(r, `","match"`)]
		req, _ := http.NewRequest(http.MethodPut, "http://"+nd.HTTPAddr()+"/v1/rules/"+id, strings.NewReader(r))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "is never leased") {
			t.Fatalf("PUT %s with a fixed lease: %d %s, want 400 ... is never leased", id, resp.StatusCode, body)
		}
	}
	if v := c.Nodes[0].Store().Current().Version; v != before {
		t.Fatalf("a refused write changed the rules: version %d -> %d", before, v)
	}
}
