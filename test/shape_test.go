package test

import (
	"strings"
	"testing"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/ring"
)

// A node of another ring shape (here a cluster made before the default
// changed: 271 partitions, 20 vnodes, consistent layout) is refused at
// join with an error naming both shapes, and the cluster does not take it
// in; a node of the same shape still joins.
func TestMismatchedShapeRefusedAtJoin(t *testing.T) {
	c := testcluster.New(t, 1)
	cfg := testcluster.Config(t, "legacy")
	cfg.Ring = ring.LegacyConfig()
	cfg.Join = []string{c.Nodes[0].GossipAddr()}
	nd, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	err = nd.Start()
	if err == nil {
		t.Fatal("a node of the legacy shape joined a cluster of the default shape")
	}
	for _, want := range []string{ring.LegacyConfig().Shape(), ring.DefaultConfig().Shape(), "member n1", "--partitions"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	_ = nd.Close()
	for _, m := range c.Nodes[0].Members().Members {
		if m.ID == "legacy" {
			t.Fatalf("the cluster lists the refused node: %+v", m)
		}
	}
	c.Add()
	c.WaitStable(2)
}

// Moving to another shape (docs/operations.md): a new cluster of the new
// shape beside the old, the same rules applied to both, the gateway moved
// over. Each cluster decides exactly; the move carries no counters, so a
// key spent on the old cluster is admitted up to one more limit on the new
// one and not more (the documented bound).
func TestMoveToNewShapeBesideTheOld(t *testing.T) {
	old := testcluster.NewConfigured(t, 2, func(cfg *node.Config) { cfg.Ring = ring.LegacyConfig() })
	next := testcluster.NewConfigured(t, 2, func(cfg *node.Config) { cfg.ClusterName = "weir-next" })
	// The checks a gateway sends, through each node in turn.
	spend := func(c *testcluster.Cluster, gw string) int {
		c.ApplyRules(scaleRules)
		allowed := 0
		for i := range 8 {
			ok, answered, err := httpCheck(c.Nodes[i%2].HTTPAddr(), "five", "moved")
			if err != nil || !answered {
				t.Fatalf("%s check %d: answered %v, %v", gw, i, answered, err)
			}
			if ok {
				allowed++
			}
		}
		return allowed
	}
	if got := spend(old, "gw-old"); got != 5 {
		t.Fatalf("the old cluster (%s) admitted %d of 8, want 5", ring.LegacyConfig().Shape(), got)
	}
	if got := spend(next, "gw-moved"); got != 5 {
		t.Fatalf("after the move the new cluster admitted %d of 8, want one limit (5) and no more", got)
	}
	if got := next.Nodes[0].Members().PartitionCount; got != ring.DefaultPartitionCount {
		t.Errorf("the new cluster has %d partitions, want %d", got, ring.DefaultPartitionCount)
	}
}
