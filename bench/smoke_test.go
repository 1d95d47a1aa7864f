package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
)

// Short count-bounded runs against a real 1-node cluster, through every
// Weir target: the gateway SDK (one client per gateway), the HTTP check
// API, and the SDK with a leased rule. Each run must complete with
// decisions and no errors; the admitted counts are exact arithmetic, not
// timings (refill 1/h adds nothing within the test).
func TestSmokeOneNode(t *testing.T) {
	n := testcluster.New(t, 1).Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// A loaded machine under -race can take longer than the rules'
	// default 5ms to answer; a fail-mode decision would count as an error.
	const timeout = 5 * time.Second
	exact := Scenario{Name: "smoke", Keys: 4, Cost: 1, Accuracy: true, Timeout: timeout,
		Rules: []RuleSpec{{ID: "smoke", Rate: 1, Period: time.Hour, Burst: 100}}}
	mw := Scenario{Name: "smoke-mw", Keys: 2, Cost: 1, Timeout: timeout, Rules: []RuleSpec{
		{ID: "mw.a", Rate: 1, Period: time.Hour, Burst: 50},
		{ID: "mw.b", Rate: 1, Period: time.Hour, Burst: 30},
	}}
	lease := Scenario{Name: "smoke-lease", Keys: 1, Cost: 1, Accuracy: true, Timeout: timeout,
		Rules: []RuleSpec{{ID: "smoke.lease", Rate: 1, Period: 59 * time.Minute, Burst: 100, Lease: 20}}}
	yaml := exact.RulesYAML() + mw.RulesYAML()[len("rules:\n"):] + lease.RulesYAML()[len("rules:\n"):] + exact.RLSRulesYAML()
	ids := append(append(exact.RuleIDs(), mw.RuleIDs()...), lease.RuleIDs()...)
	if err := ApplyRules(ctx, n.HTTPAddr(), yaml, ids, []string{n.GRPCAddr()}, nil, nil); err != nil {
		t.Fatal(err)
	}
	cl, err := ReadCluster(ctx, []string{n.GRPCAddr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cl.HTTPAddrs(); len(got) != 1 || got[0] != n.HTTPAddr() || cl.Owner("apikey:x") != n.ID() {
		t.Fatalf("cluster view: http %v, owner %q", got, cl.Owner("apikey:x"))
	}
	sdk := SDKFactory(ctx, []string{n.GRPCAddr()}, SDKOptions{GatewayPrefix: "smoke"})
	run := func(cfg Config, sc Scenario, f Factory) *Result {
		t.Helper()
		r, err := Run(ctx, cfg, sc, f)
		if err != nil {
			t.Fatal(err)
		}
		if r.Checks != cfg.Count || r.Errors != 0 {
			t.Fatalf("%s/%s: checks %d errors %d (first: %s); want %d and 0", r.Target, sc.Name, r.Checks, r.Errors, r.FirstEr, cfg.Count)
		}
		t.Logf("%s/%s: %d checks, %d allowed, p50 %.0fµs, accuracy %+v", r.Target, sc.Name, r.Checks, r.Allowed, r.P50us, r.Accuracy)
		return r
	}
	cfg := Config{Callers: 16, Gateways: 4, Count: 2000, Seed: 1}

	// Exact mode, through the SDK, HTTP and the Envoy rate limit service:
	// 4 keys × burst 100, each asked ~500 times, admit exactly the burst
	// per key.
	for _, tc := range []struct {
		target string
		f      Factory
	}{{TargetSDK, sdk}, {TargetHTTP, HTTPFactory(cl.HTTPAddrs(), 4, nil)}, {TargetRLS, RLSFactory([]string{n.GRPCAddr()})}} {
		c := cfg
		c.Target, c.KeyPrefix = tc.target, tc.target+":"
		r := run(c, exact, tc.f)
		if r.Allowed != 4*100 || r.Accuracy == nil || len(r.Accuracy.Admitted) != 4 {
			t.Fatalf("%s: allowed %d, accuracy %+v; want 400 over 4 keys", tc.target, r.Allowed, r.Accuracy)
		}
		if sdkRun := tc.target == TargetSDK; sdkRun != (r.ItemsPerRPC >= 1) {
			t.Fatalf("%s: %.2f checks per RPC; the SDK reports its coalescing (≥ 1), HTTP and RLS do not", tc.target, r.ItemsPerRPC)
		}
		for k, a := range r.Accuracy.Admitted {
			if a != 100 {
				t.Fatalf("%s: key %d admitted %d, want the burst 100", tc.target, k, a)
			}
		}
	}

	// Groups through the SDK: two windows per check, all-or-nothing; the
	// smaller burst bounds each key.
	c := cfg
	c.Target, c.KeyPrefix, c.Count = TargetSDK, "mw:", 400
	if r := run(c, mw, sdk); r.Allowed != 2*30 {
		t.Fatalf("multiwindow: allowed %d, want %d", r.Allowed, 2*30)
	}

	// Leases: one hot key from 4 gateways. Tokens are taken from the
	// owner before they are spent, so admitted never passes the burst.
	// (How many lease tokens are still unspent when the count runs out
	// depends on scheduling: the gateways the owner denied answer from
	// their blocked-until cache in microseconds and use up the count, so
	// the lower side is not asserted.)
	c = cfg
	c.Target, c.KeyPrefix, c.Leases = TargetSDK, "lease:", true
	r := run(c, lease, sdk)
	a := r.Accuracy
	if a == nil || a.Lease != 20 || a.LeaseBound != 20*4 {
		t.Fatalf("lease accuracy %+v, want lease 20 and bound 80", a)
	}
	if adm := a.Admitted[0]; adm < 1 || adm > 100 {
		t.Fatalf("lease: admitted %d, want 1 to the burst 100", adm)
	}
	// The SDK says which checks it decided itself (leases, the
	// blocked-until cache): most here, never the grabs.
	if sp := r.Split; sp == nil || sp.Local < r.Checks/2 || sp.Local >= r.Checks || sp.RemoteP50us <= 0 {
		t.Fatalf("lease: split %+v of %d checks, want most but not all decided at the gateway", sp, r.Checks)
	}
}

// A check the SDK decides by the rule's fail mode because the cluster is
// gone is an error for the bench, never a decision.
func TestSDKFallbackIsAnError(t *testing.T) {
	tc := testcluster.New(t, 1)
	n := tc.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc := Scenario{Name: "gone", Keys: 1, Cost: 1, Timeout: 2 * time.Second,
		Rules: []RuleSpec{{ID: "gone", Rate: 1, Period: time.Hour, Burst: 100}}}
	if err := ApplyRules(ctx, n.HTTPAddr(), sc.RulesYAML(), sc.RuleIDs(), []string{n.GRPCAddr()}, nil, nil); err != nil {
		t.Fatal(err)
	}
	g, err := SDKFactory(ctx, []string{n.GRPCAddr()}, SDKOptions{GatewayPrefix: "gone"})(0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if ok, err := g.Check(ctx, "apikey:k", "gone", 1); !ok || err != nil {
		t.Fatalf("live cluster: %v, %v; want allowed", ok, err)
	}
	tc.Kill(0)
	ok, err := g.Check(ctx, "apikey:k", "gone", 1)
	if !errors.Is(err, ErrUndecided) || ok {
		t.Fatalf("cluster gone: %v, %v; want ErrUndecided", ok, err)
	}
}
