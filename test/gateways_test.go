package test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/internal/testwait"
)

// A rule change applied through one node reaches every gateway, each
// bootstrapped from a different node, and is enforced there. The time
// until the last gateway has it is logged (target: under 1 s).
func TestRuleChangeReachesEveryGateway(t *testing.T) {
	c := newCluster(t, 3)
	v0 := c.ApplyRules(exactRules)
	var gws []*client.Client
	for i, n := range c.Live() {
		cfg := client.DefaultConfig()
		cfg.Cluster, cfg.GatewayID = []string{n.GRPCAddr()}, fmt.Sprintf("gw%d", i)
		cl, err := client.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		testwait.For(t, 20*time.Second, "gateway "+cfg.GatewayID+" to hold the rules", func() error {
			if got := cl.RulesVersion(); got < v0 {
				return fmt.Errorf("version %d < %d", got, v0)
			}
			return nil
		})
		gws = append(gws, cl)
	}
	start := time.Now()
	v := c.ApplyRules(exactRules + `
  - id: added
    match: {route: /added}
    key: global
    rate: 1
    period: 1h
    burst: 2
    timeout: 2s
`)
	var mu sync.Mutex
	var slowest time.Duration
	var wg sync.WaitGroup
	for _, cl := range gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			testwait.For(t, 10*time.Second, "the change at every gateway", func() error {
				if got := cl.RulesVersion(); got < v {
					return fmt.Errorf("version %d < %d", got, v)
				}
				return nil
			})
			mu.Lock()
			slowest = max(slowest, time.Since(start))
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("rule change applied and at all %d gateways in %v", len(gws), slowest)
	// One global limit of 2, shared by the three gateways.
	allowed := 0
	for i := 0; i < 6; i++ {
		if d := gws[i%3].Decide(context.Background(), client.Request{Route: "/added", Method: "GET"}); d.Allowed {
			allowed++
		} else if d.Status != 429 || d.Policy == nil || d.Policy.Rule != "added" {
			t.Fatalf("check %d: %+v, want allowed or a 429 from rule added", i, d)
		}
	}
	if allowed != 2 {
		t.Fatalf("the new global limit of 2 admitted %d of 6 across 3 gateways", allowed)
	}
}
