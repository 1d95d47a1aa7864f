package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
)

// ringVersions reads the ring version every live node reports, through
// GET /v1/cluster (what `weir members` shows).
func ringVersions(t *testing.T, nodes []*node.Node) (map[string]uint64, error) {
	t.Helper()
	out := map[string]uint64{}
	for _, n := range nodes {
		resp, err := http.Get("http://" + n.HTTPAddr() + "/v1/cluster")
		if err != nil {
			return nil, err
		}
		var body struct {
			RingVersion uint64 `json:"ring_version"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: /v1/cluster: %v", n.ID(), err)
		}
		out[n.ID()] = body.RingVersion
	}
	return out, nil
}

// Nodes with the same members report the same ring version (it identifies
// the member set; it is not a local counter), and a different one once the
// member set changes.
func TestClusterRingVersionAgrees(t *testing.T) {
	c := newCluster(t, 3)
	agreed := func(nodes []*node.Node) uint64 {
		t.Helper()
		var ver uint64
		testwait.For(t, 10*time.Second, "every node on one ring version", func() error {
			vs, err := ringVersions(t, nodes)
			if err != nil {
				return err
			}
			ver = vs[nodes[0].ID()]
			for id, v := range vs {
				if v != ver || v == 0 {
					return fmt.Errorf("ring versions differ: %v (%s has %d)", vs, id, v)
				}
			}
			return nil
		})
		return ver
	}
	v3 := agreed(c.Live())
	c.Kill(2)
	c.WaitStable(2)
	v2 := agreed(c.Live())
	if v2 == v3 {
		t.Fatalf("ring version %d did not change when a member died", v2)
	}
	t.Logf("ring version with 3 members %d, with 2 members %d", v3, v2)
}
