package bench

import (
	"context"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/node"
)

// startNode starts one real in-process node on loopback and waits until it
// is ready (it leads its own Raft group).
func startNode(t *testing.T) *node.Node {
	t.Helper()
	return testcluster.New(t, 1).Nodes[0]
}

// A count-bounded run through the coalescing sender against a 1-node
// cluster completes with no errors and admits no more than the limit.
func TestSmokeWeirOneNode(t *testing.T) {
	n := startNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc := Scenario{Name: "smoke", Keys: 4, Cost: 1, Accuracy: true,
		Rules: []RuleSpec{{ID: "smoke", Rate: 1, Period: time.Hour, Burst: 100}}}
	mw := Scenario{Name: "smoke-mw", Keys: 2, Cost: 1, Rules: []RuleSpec{
		{ID: "mw.a", Rate: 1, Period: time.Hour, Burst: 50},
		{ID: "mw.b", Rate: 1, Period: time.Hour, Burst: 30},
	}}
	yaml := sc.RulesYAML() + mw.RulesYAML()[len("rules:\n"):]
	if err := ApplyRules(ctx, n.HTTPAddr(), yaml, append(sc.RuleIDs(), mw.RuleIDs()...), []string{n.GRPCAddr()}); err != nil {
		t.Fatal(err)
	}
	wc, err := NewWeirCluster(ctx, []string{n.GRPCAddr()}, DefaultWeirOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	if got := wc.Members(); len(got) != 1 || got[n.ID()] != n.GRPCAddr() {
		t.Fatalf("members %v", got)
	}

	cfg := Config{Target: "weir", Callers: 16, Gateways: 4, Count: 2000, KeyPrefix: "smoke:", Seed: 1}
	r, err := Run(ctx, cfg, sc, wc.Factory())
	if err != nil {
		t.Fatal(err)
	}
	if r.Checks != 2000 || r.Errors != 0 {
		t.Fatalf("checks %d errors %d (first: %s); want 2000 and 0", r.Checks, r.Errors, r.FirstEr)
	}
	// 4 keys × burst 100, each asked ~500 times; the refill (1/h) adds
	// nothing within the test: exactly the burst per key.
	if r.Allowed != 4*100 {
		t.Fatalf("allowed %d, want %d", r.Allowed, 4*100)
	}
	if r.Accuracy == nil || len(r.Accuracy.Admitted) != 4 {
		t.Fatalf("accuracy missing: %+v", r.Accuracy)
	}
	for k, a := range r.Accuracy.Admitted {
		if a != 100 {
			t.Fatalf("key %d admitted %d, want the burst 100", k, a)
		}
	}

	// Groups: two windows per check, all-or-nothing; the smaller burst
	// bounds each key.
	cfg.KeyPrefix, cfg.Count = "smoke-mw:", 400
	r, err = Run(ctx, cfg, mw, wc.Factory())
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors != 0 || r.Allowed != 2*30 {
		t.Fatalf("multiwindow: errors %d (%s) allowed %d, want 0 and %d", r.Errors, r.FirstEr, r.Allowed, 2*30)
	}
}
