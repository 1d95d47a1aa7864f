package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/node"
)

// weir limits shows a calendar rule's reset at the next boundary in the
// rule's own zone, and names the unit and the zone.
func TestLimitsShowsCalendarReset(t *testing.T) {
	now := time.Date(2026, 12, 15, 12, 0, 0, 0, time.UTC).UnixNano()
	c := testcluster.NewConfigured(t, 1, func(cfg *node.Config) { cfg.Now = func() int64 { return now } })
	c.ApplyRules(`
rules:
  - {id: plan.month, match: {route: /m}, key: apikey, algorithm: fixed_window, rate: 10000, calendar: month, timezone: Europe/Berlin}
`)
	addr := "http://" + c.Nodes[0].HTTPAddr()
	resp, err := http.Post(addr+"/v1/limits/check", "application/json", strings.NewReader(`{"key":"apikey:c","rule":"plan.month"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := runCLI(t, "", nil, "limits", "apikey:c", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "9999") ||
		!strings.Contains(r.stdout, "2027-01-01T00:00:00.000+01:00 (month, Europe/Berlin)") {
		t.Fatalf("weir limits apikey:c: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", nil, "rules", "list", "--addr", addr); r.code != 0 || !strings.Contains(r.stdout, "10000/month Europe/Berlin") {
		t.Fatalf("weir rules list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
