package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
)

// How long the survivors take to drop a dead node from their ring with the
// production gossip tuning (node.DefaultConfig, not the looser test
// tuning). The node dies at once: its links are cut (as when a machine
// fails) and then it is closed without leaving. The time is logged, never
// asserted (the machine is shared); the test asserts that the ring changes.
// Measure with:
//
//	go test -count=10 -run TestClusterDeathDetectionDefaultTuning -v ./test/ | grep detected
func TestClusterDeathDetectionDefaultTuning(t *testing.T) {
	c := &testcluster.Cluster{T: t, Faults: testcluster.NewFaults()}
	t.Cleanup(c.Close)
	def := node.DefaultConfig("")
	for i := 0; i < 3; i++ {
		cfg := testcluster.Config(t, fmt.Sprintf("n%d", i+1))
		cfg.GossipProbeInterval = def.GossipProbeInterval
		cfg.GossipProbeTimeout = def.GossipProbeTimeout
		cfg.GossipInterval = def.GossipInterval
		cfg.GossipSuspicionMult = def.GossipSuspicionMult
		cfg.BootstrapExpect = 3
		if i > 0 {
			cfg.Join = []string{c.Nodes[0].GossipAddr()}
		}
		c.Start(cfg)
	}
	c.WaitStable(3)

	victim := c.Nodes[2]
	start := time.Now()
	c.Faults.Isolate(victim.ID())
	c.Kill(2)
	seen := map[string]time.Duration{}
	testwait.For(t, 60*time.Second, "the survivors' ring without the dead node", func() error {
		for _, n := range c.Live() {
			if _, ok := seen[n.ID()]; ok {
				continue
			}
			if testcluster.InRing(n) == 2 {
				seen[n.ID()] = time.Since(start)
			}
		}
		if len(seen) < 2 {
			return fmt.Errorf("%d of 2 survivors changed their ring", len(seen))
		}
		return nil
	})
	var first, last time.Duration
	for _, d := range seen {
		if first == 0 || d < first {
			first = d
		}
		last = max(last, d)
	}
	t.Logf("death detected: first survivor %v, last survivor %v (probe %v, timeout %v, suspicion x%d)",
		first.Round(time.Millisecond), last.Round(time.Millisecond), def.GossipProbeInterval, def.GossipProbeTimeout, def.GossipSuspicionMult)
	for _, n := range c.Live() {
		if st := memberState(n, victim.ID()); st != "dead" {
			t.Errorf("%s lists the killed %s as %q, want \"dead\"", n.ID(), victim.ID(), st)
		}
	}
}
