package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node/opsapi"
)

const reportRules = `
rules:
  - id: blk
    match: {route: /b}
    key: apikey
    rate: 1
    period: 1h
    burst: 1
    fail_mode: closed
  - id: capped
    match: {route: /c}
    key: ip
    rate: 100
    period: 1m
    max_keys: 1
    fail_mode: open
    events: {sample: 1}
`

// Decisions a gateway makes without the owner (the blocked-until cache; a
// fail-open fallback, here forced by the rule's key cap) are reported to
// the nodes in batches: they count in weir_checks_total and
// weir_gateway_decisions_total, the gateway shows in the snapshot with its
// fail-open count (a gateway with nothing to count shows too), and its
// fail-mode decisions become events.
func TestGatewayDecisionsReported(t *testing.T) {
	c := testcluster.New(t, 1)
	ver := c.ApplyRules(reportRules)
	cfg := client.DefaultConfig()
	cfg.Cluster = []string{c.Nodes[0].GRPCAddr()}
	cfg.GatewayID = "gw-report"
	cfg.ReportInterval = 100 * time.Millisecond
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	quietCfg := cfg // a gateway that decides nothing itself still shows (it reports empty batches)
	quietCfg.GatewayID = "gw-quiet"
	quiet, err := client.New(context.Background(), quietCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// blk: allowed once, denied by the owner, then by the blocked-until
	// cache; a check the owner does not answer in time (a fresh
	// connection under -race) fails closed, also a gateway-side decision.
	closed := 0
	for i := 0; i < 6; i++ {
		d, err := cl.CheckKey(ctx, "apikey:abuser", 1, "blk")
		if err != nil {
			t.Fatal(err)
		}
		if d.Limits[0].Fallback {
			closed++
		}
	}
	opened := 0
	for i := 0; i < 200 && opened < 3; i++ { // more keys than the cap: the node answers key_cap, the gateway fails open
		d, err := cl.CheckKey(ctx, fmt.Sprintf("ip:10.7.0.%d", i), 1, "capped")
		if err != nil {
			t.Fatal(err)
		}
		if d.Limits[0].Fallback && d.Limits[0].Allowed {
			opened++
		}
	}
	blocked := cl.Stats().BlockedHits
	if opened < 3 || blocked < 1 {
		t.Fatalf("%d fail-open decisions, %d blocked-until hits: the test did not make gateway-side decisions", opened, blocked)
	}

	base := "http://" + c.Nodes[0].HTTPAddr()
	testwait.For(t, 10*time.Second, "the gateway's report in the node's metrics and snapshot", func() error {
		m := get(t, base+"/metrics")
		for _, want := range []string{
			fmt.Sprintf(`weir_gateway_decisions_total{decision="denied",reason="local",rule="blk"} %d`, blocked),
			fmt.Sprintf(`weir_gateway_decisions_total{decision="denied",reason="fail_closed",rule="blk"} %d`, closed),
			fmt.Sprintf(`weir_gateway_decisions_total{decision="allowed",reason="fail_open",rule="capped"} %d`, opened),
		} {
			if !strings.Contains(m, want+"\n") {
				return fmt.Errorf("metrics lack %q", want)
			}
		}
		// The owner's own denials plus the reported ones.
		if n := metricValue(m, `weir_checks_total{decision="denied",rule="blk"}`); n < float64(blocked)+float64(closed) {
			return fmt.Errorf("weir_checks_total denied blk = %v, want >= %d reported", n, blocked+uint64(closed))
		}
		var s opsapi.Snapshot
		if err := json.Unmarshal([]byte(get(t, base+"/v1/ops/snapshot")), &s); err != nil {
			return err
		}
		if len(s.Gateways) != 2 || s.Gateways[0].ID != "gw-quiet" || s.Gateways[0].Local+s.Gateways[0].FailOpen != 0 ||
			s.Gateways[1].ID != "gw-report" || s.Gateways[1].FailOpen != uint64(opened) || s.Gateways[1].Local != blocked {
			return fmt.Errorf("gateways %+v", s.Gateways)
		}
		for _, e := range s.Events {
			if e.Gateway == "gw-report" && e.Rule == "capped" && e.Decision == "allowed" && e.RuleVersion == ver {
				return nil
			}
		}
		return fmt.Errorf("no fail-open event from the gateway in %+v", s.Events)
	})
}

// metricValue is the value of the sample named exactly series (-1: none).
func metricValue(metrics, series string) float64 {
	for _, l := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
