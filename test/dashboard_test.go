package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node/opsapi"
)

const dashboardRules = `
rules:
  - id: orders.write
    match: {route: /v1/orders, method: POST}
    key: apikey
    rate: 5
    period: 1s
    burst: 5
    events: {sample: 0.5}
  - id: search.ip
    match: {route: /v1/search}
    key: ip
    rate: 100
    period: 1s
  - id: edge.internal
    match: {domain: edge, descriptor: [{key: plan, value: internal}]}
    unlimited: true
  - id: jobs.inflight
    match: {route: /v1/jobs, method: POST}
    key: apikey
    algorithm: concurrency
    limit: 20
    permit_ttl: 5m
`

// dashboardRuleIDs are the rules of dashboardRules.
var dashboardRuleIDs = []string{"orders.write", "search.ip", "edge.internal", "jobs.inflight"}

// chromium finds a headless Chromium, or skips: CI (.ci/run) installs it.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium not installed (apt-get install -y chromium; .ci/run installs it): skipping the dashboard browser test")
	return ""
}

// The dashboard at /ui/, loaded in a real headless Chromium against a
// 3-node cluster under a little load, shows the member ids, the rule ids,
// a non-zero denied rate, an event, the reporting gateway and a
// concurrency rule's permits in use over the cluster (held on keys owned
// by different nodes; the number follows a release), all read from the
// rendered DOM. WEIR_DASHBOARD_PNG=path also saves a screenshot
// there (docs/dashboard.png is made so).
func TestDashboardInChromium(t *testing.T) {
	bin := chromium(t)
	c := testcluster.New(t, 3)
	c.ApplyRules(dashboardRules)

	// A little load through every node: bounded in count and in time.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i, nd := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := "http://" + nd.HTTPAddr()
			for j := 0; j < 20000 && ctx.Err() == nil; j++ {
				body := fmt.Sprintf(`{"key":"apikey:ak_%d","rule":"orders.write"}`, j%3)
				if j%2 == 1 {
					body = fmt.Sprintf(`{"key":"ip:10.0.%d.%d","rule":"search.ip"}`, i, j%5)
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/limits/check", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond): // a little load: ~150 checks/s over 3 nodes
				}
			}
		}()
	}
	// An override of orders.write: the dashboard lists it with its rule.
	ovReq, _ := http.NewRequest(http.MethodPut, "http://"+c.Nodes[0].HTTPAddr()+"/v1/overrides",
		strings.NewReader(`{"key":"apikey:ak_partner","rule":"orders.write","rate":50}`))
	ovReq.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(ovReq); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("override: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	report := `{"gateway":"gw-edge-1","counts":[{"rule":"orders.write","local_denied":3,"fail_open":2}]}`
	if resp, err := http.Post("http://"+c.Nodes[1].HTTPAddr()+"/v1/gateways/report", "application/json", strings.NewReader(report)); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("gateway report: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	ui := "http://" + c.Nodes[0].HTTPAddr() + "/ui/"
	testwait.For(t, 30*time.Second, "denials in the snapshot's rates", func() error {
		resp, err := http.Get("http://" + c.Nodes[0].HTTPAddr() + "/v1/ops/snapshot")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var s opsapi.Snapshot
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			return err
		}
		for _, rr := range s.Rates {
			if n := len(rr.Points); rr.Rule == "orders.write" && n >= 2 && rr.Points[n-1].Denied > 0 && rr.Points[n-2].Denied > 0 && len(s.Events) > 0 {
				return nil
			}
		}
		return fmt.Errorf("no denied rate yet")
	})

	dir := t.TempDir()
	args := func(extra ...string) []string {
		return append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--no-first-run", "--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1280,1100",
			"--virtual-time-budget=3000"}, extra...)
	}
	run := func(extra ...string) string {
		cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
		defer ccancel()
		out, err := exec.CommandContext(cctx, bin, args(extra...)...).Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", extra, err)
		}
		return string(out)
	}
	// Permits of jobs.inflight on keys spread over the nodes: the page
	// shows the cluster's sum, and less once some are released.
	var permits []string
	for i := range 6 {
		permits = append(permits, takePermit(t, c.Nodes[i%3].HTTPAddr(), fmt.Sprintf("apikey:job_%d", i)))
	}
	dom := run("--dump-dom", ui)
	inUse := regexp.MustCompile(`<tr data-rule="jobs.inflight">.*?data-inuse="([0-9]+)">([^<]*)</td>`)
	if m := inUse.FindStringSubmatch(dom); m == nil || m[1] != "6" || m[2] != "6 / 20" {
		t.Errorf("jobs.inflight in use with 6 permits held: %q, want 6 (6 / 20)", m)
	}
	for i := range 4 {
		releasePermit(t, c.Nodes[(i+1)%3].HTTPAddr(), fmt.Sprintf("apikey:job_%d", i), permits[i])
	}
	dom2 := run("--dump-dom", ui)
	if m := inUse.FindStringSubmatch(dom2); m == nil || m[1] != "2" {
		t.Errorf("jobs.inflight in use after 4 of 6 permits were released: %q, want 2\n%s", m, dom2)
	}

	for _, nd := range c.Nodes {
		if !strings.Contains(dom, `<tr data-id="`+nd.ID()+`">`) {
			t.Errorf("rendered page lacks member %s", nd.ID())
		}
	}
	for _, id := range dashboardRuleIDs {
		if !strings.Contains(dom, `<tr data-rule="`+id+`">`) {
			t.Errorf("rendered page lacks rule %s", id)
		}
	}
	// An unlimited rule says so (not "0/0s token_bucket"); the ring's
	// replication factor is labelled as what it is, not as copies.
	if !regexp.MustCompile(`<tr data-rule="edge.internal"><td>edge.internal</td><td>[^<]*</td><td>unlimited</td>`).MatchString(dom) {
		t.Errorf("rendered page does not show edge.internal as unlimited")
	}
	if !strings.Contains(dom, `<th>virtual nodes per member</th>`) || strings.Contains(dom, "replication factor") {
		t.Errorf("rendered page labels the ring's virtual nodes as a replication factor")
	}
	m := regexp.MustCompile(`<tr data-rule="orders.write">.*?data-denied="([0-9.e+-]+)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no denied rate for orders.write in the page:\n%s", dom)
	}
	if v, err := strconv.ParseFloat(m[1], 64); err != nil || v <= 0 {
		t.Errorf("orders.write denied/s = %q, want > 0", m[1])
	}
	// Every sparkline is drawn on one time axis and one scale.
	axes := regexp.MustCompile(`<svg class="spark"[^>]*?data-t0="([^"]*)" data-t1="([^"]*)" data-max="([^"]*)"`).FindAllStringSubmatch(dom, -1)
	if len(axes) != len(dashboardRuleIDs) {
		t.Errorf("%d sparklines with their axes, want one for each of the %d rules", len(axes), len(dashboardRuleIDs))
	}
	for _, a := range axes {
		if a[1] != axes[0][1] || a[2] != axes[0][2] || a[3] != axes[0][3] {
			t.Errorf("sparklines on different axes: t0, t1, max %q and %q", a[1:], axes[0][1:])
		}
	}
	if len(axes) > 0 && axes[0][1] == axes[0][2] {
		t.Errorf("the sparklines' time axis is empty: %q", axes[0][1:])
	}
	if !regexp.MustCompile(`<tr data-rule="orders.write">.*?<td class="overrides">1 override \(apikey:ak_partner: rate 50, burst 50\)</td>`).MatchString(dom) {
		t.Errorf("rendered page does not list orders.write's override")
	}
	if !regexp.MustCompile(`<tr class="event"><td>[^<]+</td><td>orders.write</td>`).MatchString(dom) {
		t.Errorf("rendered page shows no orders.write event")
	}
	if !strings.Contains(dom, `<tr data-gateway="gw-edge-1">`) {
		t.Errorf("rendered page lacks the reporting gateway")
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}

	png := filepath.Join(dir, "dashboard.png")
	if p := os.Getenv("WEIR_DASHBOARD_PNG"); p != "" {
		png, _ = filepath.Abs(p)
	}
	run("--screenshot="+png, ui)
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Fatalf("screenshot %s: %v", png, err)
	}
}

// takePermit checks key under jobs.inflight at addr and returns the
// permit it holds.
func takePermit(t *testing.T, addr, key string) string {
	t.Helper()
	var res struct {
		Allowed bool   `json:"allowed"`
		Permit  string `json:"permit"`
	}
	postOK(t, "http://"+addr+"/v1/limits/check", fmt.Sprintf(`{"key":%q,"rule":"jobs.inflight"}`, key), &res)
	if !res.Allowed || res.Permit == "" {
		t.Fatalf("check %s: %+v, want a permit", key, res)
	}
	return res.Permit
}

// releasePermit gives permit of key back through addr (any node).
func releasePermit(t *testing.T, addr, key, permit string) {
	t.Helper()
	var res struct {
		Released bool `json:"released"`
	}
	postOK(t, "http://"+addr+"/v1/limits/release", fmt.Sprintf(`{"key":%q,"rule":"jobs.inflight","permit":%q}`, key, permit), &res)
	if !res.Released {
		t.Fatalf("release of %s's permit: not released", key)
	}
}

func postOK(t *testing.T, url, body string, v any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s %s: %s", url, body, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
}
