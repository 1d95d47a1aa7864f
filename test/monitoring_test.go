package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/limit"
)

// The shipped alert rules are valid and fire as their unit tests say
// (promtool, from Debian's prometheus package; .ci/run installs it).
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install -y prometheus; .ci/run installs it): skipping the alert rules check")
	}
	dir := filepath.Join("..", "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// Every weir_* metric the alerts and the Grafana dashboard use is one a
// real node exports (after checks, a denial and a gateway report, so the
// labelled series exist).
func TestMonitoringMetricNamesExist(t *testing.T) {
	var used []string
	name := regexp.MustCompile(`\bweir_[a-z_]+\b`)
	for _, f := range []string{"prometheus/alerts.yaml", "grafana/weir.json"} {
		b, err := os.ReadFile(filepath.Join("..", "deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".json") && !json.Valid(b) {
			t.Fatalf("%s is not valid JSON", f)
		}
		used = append(used, name.FindAllString(string(b), -1)...)
	}
	slices.Sort(used)
	used = slices.Compact(used)
	if len(used) < 8 {
		t.Fatalf("found only %v", used)
	}

	c := testcluster.New(t, 1)
	c.ApplyRules(dashboardRules + `
  - id: capped
    match: {route: /c}
    key: ip
    rate: 1
    period: 1m
    max_keys: 1
`)
	base := "http://" + c.Nodes[0].HTTPAddr()
	items := make([]limit.Item, 1000) // denials after the burst; hot-key samples (1 in 32) for sure
	for i := range items {
		items[i] = limit.Item{Key: "apikey:m", Rule: "orders.write", Cost: 1}
	}
	if err := c.Nodes[0].Check(context.Background(), items, make([]limit.Result, len(items))); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ { // more keys than the cap: key_cap refusals
		postAny(t, base+"/v1/limits/check", fmt.Sprintf(`{"key":"ip:10.9.0.%d","rule":"capped"}`, i))
	}
	post(t, base+"/v1/gateways/report", `{"gateway":"gw","counts":[{"rule":"orders.write","fail_open":1}]}`)
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	have := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			have[f[2]] = true
		}
	}
	for _, u := range used {
		base := u
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if s, ok := strings.CutSuffix(u, suf); ok && have[s] {
				base = s
			}
		}
		if !have[base] { // (recording rules, weir:…, do not match the regexp)
			t.Errorf("%s is used by deploy/ but a node does not export it", u)
		}
	}
}

func postAny(t *testing.T, url, body string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func post(t *testing.T, url, body string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
}
