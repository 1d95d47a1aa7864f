package test

import (
	"context"
	"testing"
	"time"

	"github.com/weirlimit/weir/bench"
)

// TestBenchGatewayTargets runs weir bench's gateway and proxy targets
// through real `weir gateway` processes in front of a spawned node: every
// request is decided (no errors); through the rule's route the admitted
// count is exactly the burst of each key (refill 1/h adds nothing), on the
// route no rule matches every request passes.
func TestBenchGatewayTargets(t *testing.T) {
	bin := weirBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sp, err := bench.SpawnCluster(ctx, bin, 1, nil, bench.SpawnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
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
		cfg := bench.Config{Target: "gw", Callers: 8, Gateways: 2, Count: 300, Seed: 1, KeyPrefix: "p" + map[bool]string{true: "c", false: "n"}[check] + ":"}
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
	}
}
