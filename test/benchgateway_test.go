package test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/bench"
)

// TestBenchGatewayTargets runs weir bench's gateway and proxy targets
// through real `weir gateway` processes in front of a spawned node: every
// request is decided (no errors); through the rule's route the admitted
// count is exactly the burst of each key (refill 1/h adds nothing), on the
// route no rule matches every request passes. The node runs with the
// GOMAXPROCS it was spawned with, and the run reports the CPU the bench,
// the node and the gateway processes each spent per check.
func TestBenchGatewayTargets(t *testing.T) {
	bin := weirBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sp, err := bench.SpawnCluster(ctx, bin, 1, nil, bench.SpawnOptions{Procs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", sp.PIDs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	if vars := strings.Split(string(env), "\x00"); !slices.Contains(vars, "GOMAXPROCS=1") || slices.ContainsFunc(vars, func(v string) bool {
		return strings.HasPrefix(v, "GOMAXPROCS=") && v != "GOMAXPROCS=1"
	}) {
		t.Fatalf("node environment lacks exactly GOMAXPROCS=1: %q", vars)
	}
	sc := bench.Scenario{Name: "gw", Keys: 2, Cost: 1, Timeout: 5 * time.Second,
		Rules: []bench.RuleSpec{{ID: "gw.rule", Rate: 1, Period: time.Hour, Burst: 50}}}
	seeds := sp.GRPCAddrs()
	if err := bench.ApplyRules(ctx, sp.Nodes()[0].HTTP, sc.RulesYAML(), sc.RuleIDs(), seeds, nil, nil); err != nil {
		t.Fatal(err)
	}
	up, err := bench.StartUpstream()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	for _, check := range []bool{true, false} {
		cfg := bench.Config{Target: "gw", Callers: 8, Gateways: 2, Count: 300, Seed: 1, KeyPrefix: "p" + map[bool]string{true: "c", false: "n"}[check] + ":",
			Procs: bench.Procs{"nodes": sp.PIDs()}}
		r, err := bench.Run(ctx, cfg, sc, bench.GatewayFactory(ctx, bench.GatewayOptions{
			Bin: bin, Seeds: seeds, Upstream: up.Addr, Prefix: "t", Conns: 4, Check: check}))
		if err != nil {
			t.Fatal(err)
		}
		want := int64(300)
		if check {
			want = 2 * 50 // + the warm-up's key, not counted
		}
		if r.Checks != 300 || r.Errors != 0 || r.Allowed != want {
			t.Errorf("check %v: %d checks, %d allowed, %d errors (%s); want 300, %d, 0", check, r.Checks, r.Allowed, r.Errors, r.FirstEr, want)
		}
		// Each role is there; CPU is counted in 10 ms ticks, so one
		// process may show none over 300 requests, but not all of them.
		roles, sum := map[string]float64{}, 0.0
		for _, c := range r.CPU {
			roles[c.Role] = c.PerCall
			sum += c.PerCall
		}
		for _, role := range []string{"bench process", "gateway processes", "nodes"} {
			if v, ok := roles[role]; !ok || v < 0 {
				t.Errorf("check %v: CPU per check %+v: %q missing or negative", check, r.CPU, role)
			}
		}
		if len(roles) != 3 || sum <= 0 || r.CPUAvail <= 0 {
			t.Errorf("check %v: CPU per check %+v (of %.1f µs), want three roles using some CPU", check, r.CPU, r.CPUAvail)
		}
	}
}
