package client

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/ring"
)

// The client builds its ring in the cluster's shape, layout included (the
// members message has no layout: it comes as a response header), so a
// gateway of this version routes to the owners of a cluster that kept the
// legacy shape as well as of a new one.
func TestClientRingHasTheClustersShape(t *testing.T) {
	for _, shape := range []ring.Config{ring.DefaultConfig(), ring.LegacyConfig()} {
		c := testcluster.NewConfigured(t, 2, func(cfg *node.Config) { cfg.Ring = shape })
		cl := newTestClient(t, c, "gw1", nil)
		testwait.For(t, 10*time.Second, "the client's 2-member ring", func() error {
			if mv := cl.view.Load(); mv == nil || len(mv.addrs) != 2 {
				return fmt.Errorf("client view %v", mv)
			}
			return nil
		})
		if got := cl.view.Load().ring.Config().Shape(); got != shape.Shape() {
			t.Errorf("the client's ring has shape %q, the cluster's is %q", got, shape.Shape())
		}
	}
	if got := ringLayout(nil); got != ring.LayoutConsistent {
		t.Errorf("no layout header (a node before layouts) = %v, want consistent", got)
	}
}
