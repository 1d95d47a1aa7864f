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
