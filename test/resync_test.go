package test

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/ring"
)

// metric reads one unlabelled sample from n's /metrics.
func metric(t *testing.T, n *node.Node, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", n.ID(), err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s of %s: %v", name, n.ID(), err)
			}
			return f
		}
	}
	t.Fatalf("metric %s not exported by %s", name, n.ID())
	return 0
}

// A node that becomes a new replica of a partition gets the partition's
// full state from its owner, not only the counters that change afterwards:
// counters spent before the replica set changed survive the owner's later
// death (the new replica is promoted and the keys stay limited).
func TestClusterNewReplicaGetsFullState(t *testing.T) {
	c := newCluster(t, 3)
	c.ApplyRules(exactRules)

	// Keys whose partition keeps its owner when n4 joins, with n4 as its new
	// replica; all of one owner, which is killed afterwards.
	r3, err := ring.New([]string{"n1", "n2", "n3"}, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	r4, err := ring.New([]string{"n1", "n2", "n3", "n4"}, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	owner := ""
	for k := 0; len(keys) < 20 && k < 100000; k++ {
		key := fmt.Sprintf("apikey:resync%d", k)
		p := r3.Partition(key)
		o := r3.PartitionOwner(p)
		if reps := r4.PartitionReplicas(p); r4.PartitionOwner(p) != o || len(reps) < 2 || reps[1] != "n4" {
			continue
		}
		if owner == "" {
			owner = o
		}
		if o == owner {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		t.Fatal("no key gets n4 as a new replica: the ring changed, pick other names")
	}
	for i, key := range keys {
		if r := c.checkOnce(c.Nodes[i%3], key, "exact", 100); !r.Allowed {
			t.Fatalf("spending %s: denied", key)
		}
	}

	n4 := c.Add()
	c.WaitStable(4)
	ownerIdx := -1
	for i, n := range c.Nodes {
		if n != nil && n.ID() == owner {
			ownerIdx = i
		}
	}
	// Everything the owner queued is shipped (with the full resync, that
	// includes the counters spent before n4 joined).
	testwait.For(t, 10*time.Second, "replication drained on "+owner, func() error {
		if p := metric(t, c.Nodes[ownerIdx], "weir_replication_pending"); p != 0 {
			return fmt.Errorf("%v states pending", p)
		}
		return nil
	})
	t.Logf("%d keys of owner %s; n4 holds %v replica counters", len(keys), owner, metric(t, n4, "weir_replica_counters"))

	c.Kill(ownerIdx)
	c.WaitStable(3)
	for _, n := range c.Live() {
		for _, key := range keys {
			if r := c.checkOnce(n, key, "exact", 1); r.Allowed {
				t.Fatalf("via %s: %s allowed again (remaining %d) after its owner died: the new replica never got its state", n.ID(), key, r.Remaining)
			}
		}
	}
}

// A node alone in its ring queues no change for the replicator (there is
// nowhere to ship it); the counters it spent then reach the replicas that
// later members become by the full copy their owner sends them, so they
// survive its death.
func TestClusterSoloCountersReachLaterReplicas(t *testing.T) {
	c := newCluster(t, 1)
	c.ApplyRules(exactRules)
	r3, err := ring.New([]string{"n1", "n2", "n3"}, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := 0; len(keys) < 20 && k < 100000; k++ {
		key := fmt.Sprintf("apikey:solo%d", k)
		if r3.PartitionOwner(r3.Partition(key)) == "n1" {
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		if r := c.checkOnce(c.Nodes[0], key, "exact", 100); !r.Allowed {
			t.Fatalf("spending %s: denied", key)
		}
	}
	if p := metric(t, c.Nodes[0], "weir_replication_pending"); p != 0 {
		t.Fatalf("alone in its ring, n1 queued %v states for replicas it does not have", p)
	}
	c.Add()
	c.WaitStable(2)
	c.Add()
	c.WaitStable(3)
	// The full copies n1 sends its new replicas (the hand-off queues them
	// after the ring change) arrive and leave nothing pending.
	testwait.For(t, 20*time.Second, "n1's counters copied to its replicas", func() error {
		held := metric(t, c.Nodes[1], "weir_replica_counters") + metric(t, c.Nodes[2], "weir_replica_counters")
		if held < float64(len(keys)) {
			return fmt.Errorf("%v replica copies held, want %d", held, len(keys))
		}
		if p := metric(t, c.Nodes[0], "weir_replication_pending"); p != 0 {
			return fmt.Errorf("%v states pending", p)
		}
		return nil
	})
	c.Kill(0)
	c.WaitStable(2)
	for _, n := range c.Live() {
		for _, key := range keys {
			if r := c.checkOnce(n, key, "exact", 1); r.Allowed {
				t.Fatalf("via %s: %s allowed again (remaining %d) after n1 died: its replicas never got the counters it spent alone", n.ID(), key, r.Remaining)
			}
		}
	}
}
