package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestReport(t *testing.T) {
	w := &Result{Target: "weir", Scenario: "steady", Checks: 1000, Allowed: 250, PerSec: 60000, P50us: 500, P99us: 2000, P999us: 4000,
		CPU: []CPUShare{{Role: "bench process", PerCall: 12.5}, {Role: "nodes", PerCall: 20, Reads: 3.2, Writes: 1.58, Switches: 4.1, Voluntary: 3.9}}, CPUAvail: 33.3}
	r := &Result{Target: "redis", Scenario: "steady", Checks: 1000, Allowed: 250, PerSec: 30000, P50us: 1000, P99us: 4000, P999us: 4000}
	var b bytes.Buffer
	if err := WriteTable(&b, []*Result{w, r}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"checks/s", "25.0", "weir/redis steady: checks/s ×2.00, p50 ×0.50, p99 ×0.50, p99.9 ×1.00",
		"weir/steady CPU per check: bench process 12.5 µs, nodes 20.0 µs; together 32.5 µs of the 33.3 µs the machine's cores give a check at this rate"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := WriteJSON(&b, w); err != nil {
		t.Fatal(err)
	}
	if strings.Count(b.String(), "\n") != 1 {
		t.Fatalf("not one line: %q", b.String())
	}
	var back Result
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.PerSec != 60000 || back.Target != "weir" {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

// A lease run states its bound; a sub-microsecond latency keeps a decimal;
// the HTTP target gets its own ratio line.
func TestReportLeaseAndHTTP(t *testing.T) {
	l := &Result{Target: TargetSDK, Scenario: "lease", Gateways: 4, Checks: 100, PerSec: 1000, P50us: 0.4,
		Split:    &SplitLatency{Local: 97, LocalP50us: 0.3, LocalP99us: 2, RemoteP50us: 800, RemoteP99us: 2500},
		Accuracy: &AccuracyResult{Ideal: 4000, Admitted: []int64{3990}, Deviation: []float64{-0.25}, Lease: 20, LeaseBound: 80, WorstExcess: -10}}
	h := &Result{Target: TargetHTTP, Scenario: "steady", PerSec: 30000, P50us: 1000, P99us: 4000, P999us: 8000}
	r := &Result{Target: TargetRedis, Scenario: "steady", PerSec: 20000, P50us: 2000, P99us: 4000, P999us: 4000}
	var b bytes.Buffer
	if err := WriteTable(&b, []*Result{l, h, r}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		" 0.4 ",
		"lease × gateways = 20 × 4 = 80 (2.00% of ideal); worst -10",
		"weir/lease decided at the gateway: 97.0% of checks, p50 0.3 µs, p99 2.0 µs; the others p50 800 µs, p99 2500 µs",
		"weir-http/redis steady: checks/s ×1.50, p50 ×0.50, p99 ×1.00, p99.9 ×2.00",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "weir/redis lease") {
		t.Errorf("ratio for a scenario redis did not run:\n%s", out)
	}
}

// The gateway rows get their ratios to the plain proxy of the same run.
func TestReportPlainProxy(t *testing.T) {
	p := &Result{Target: TargetPlainProxy, Scenario: "steady", PerSec: 10000, P50us: 2000, P99us: 8000}
	g := &Result{Target: TargetGateway, Scenario: "steady", PerSec: 8000, P50us: 2500, P99us: 8000}
	n := &Result{Target: TargetProxy, Scenario: "steady", PerSec: 9500, P50us: 2100, P99us: 4000}
	var b bytes.Buffer
	if err := WriteTable(&b, []*Result{p, n, g}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"weir-gateway/plain-proxy steady: req/s ×0.80, p50 +0.50 ms (×1.25), p99 ×1.00",
		"gateway-proxy/plain-proxy steady: req/s ×0.95, p50 +0.10 ms (×1.05), p99 ×0.50",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "plain-proxy/plain-proxy") {
		t.Errorf("the baseline compared with itself:\n%s", out)
	}
}

// The counters per check, the idle CPU, the open loop against the promise
// and each path beside its floor at the same rate.
func TestReportCountersFloorsAndPromise(t *testing.T) {
	h := &Result{Target: TargetHTTP, Scenario: "steady", Checks: 9000, Elapsed: 1, PerSec: 900, Rate: 900, RatePct: 30, Capacity: 3000, P50us: 800, P99us: 7000,
		CPU:  []CPUShare{{Role: RoleNodes, PerCall: 200, Reads: 3.5, Writes: 2.64, Switches: 4.4, Voluntary: 3.3}},
		Idle: []Idle{{CPUPct: 8.7, Writes: 120, Reads: 250, Switches: 410}, {CPUPct: 13}, {CPUPct: 9.1}}, IdleRole: RoleNodes}
	f := &Result{Target: TargetFloorHTTP, Scenario: "steady", PerSec: 900, Rate: 900, RateFrom: "http", P50us: 400, P99us: 1000,
		CPU: []CPUShare{{Role: RoleFloor, PerCall: 50, Reads: 2, Writes: 1, Switches: 1.1}}}
	fc := &Result{Target: TargetFloorHTTP, Scenario: "steady", PerSec: 5000, CPU: []CPUShare{{Role: RoleFloor, PerCall: 40}}}
	var b bytes.Buffer
	if err := WriteTable(&b, []*Result{h, f, fc}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"weir-http/steady per check: nodes 2.64 writes, 3.50 reads, 4.40 context switches (3.30 voluntary), of which over their idle background 165.8 µs, 2.63 writes, 3.47 reads, 4.35 context switches",
		"weir-http/steady idle before the run (nodes), per process: 8.7% of a core, 120 writes/s, 250 reads/s, 410 context switches/s; 13.0% of a core, 0 writes/s, 0 reads/s, 0 context switches/s; 9.1% of a core",
		"weir-http/steady open loop: 900 checks/s scheduled (30% of the 3000 checks/s its closed loop reached in this run); latency counted from each check's scheduled time: p50 0.80 ms (promise < 1 ms: met), p99 7.00 ms (promise < 5 ms: missed)",
		"floor-http/steady open loop: 900 checks/s scheduled (the rate of http's run)",
		"weir-http/floor-http steady: node CPU 200.0 µs a check, floor 50.0 µs a call (×4.00); writes 2.64 vs 1.00, context switches 4.40 vs 1.10; checks/s ×1.00",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	h2 := *h // a paced target's second run: the same idle sample, printed once
	b.Reset()
	if err := WriteTable(&b, []*Result{h, &h2}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "idle before the run"); n != 1 {
		t.Errorf("%d idle lines for one target's two runs, want 1:\n%s", n, b.String())
	}
	if n := strings.Count(out, "weir-http/floor-http"); n != 1 {
		t.Errorf("%d floor lines, want 1 (the closed-loop floor ran at another rate):\n%s", n, out)
	}
}

// With --rate P%, each target's capacity run is compared with Redis's
// capacity run and its open loop with Redis's open loop, never across.
func TestReportRedisRatiosAtOnePace(t *testing.T) {
	wc := &Result{Target: TargetSDK, Scenario: "steady", PerSec: 12000, P50us: 2000}
	wo := &Result{Target: TargetSDK, Scenario: "steady", PerSec: 3600, Rate: 3600, RatePct: 30, P50us: 900}
	rc := &Result{Target: TargetRedis, Scenario: "steady", PerSec: 6000, P50us: 4000}
	ro := &Result{Target: TargetRedis, Scenario: "steady", PerSec: 1800, Rate: 1800, RatePct: 30, P50us: 300}
	var b bytes.Buffer
	if err := WriteTable(&b, []*Result{wc, wo, rc, ro}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"weir/redis steady: checks/s ×2.00, p50 ×0.50", "weir/redis steady: checks/s ×2.00, p50 ×3.00"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "weir/redis"); n != 2 {
		t.Errorf("%d ratio lines, want 2 (closed with closed, 30%% with 30%%):\n%s", n, out)
	}
}
