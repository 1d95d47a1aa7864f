package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/ring"
)

func newFaultyCluster(t *testing.T, n int) *cluster {
	t.Helper()
	return wrapCluster(t, testcluster.NewWithFaults(t, n))
}

const splitRules = `
rules:
  - id: split
    match: {route: /split}
    key: apikey
    rate: 1
    period: 1h
    burst: 200
  - id: exact
    match: {route: /x}
    key: apikey
    rate: 1
    period: 1h
    burst: 100
`

// A node is cut off from its peers (gossip and peer gRPC dropped by the
// test) while clients keep checking one hot key through every node, then
// the link heals. Each side of the split decides on its own ring: the
// majority promotes replicas of what the cut node owned, the cut node takes
// every partition, starting from its own counters, its replica copies or
// fresh ones. So during a split each side may admit up to a full limit for a
// key: with one node cut off at most 2 × burst in all (the refill is
// negligible), which is asserted. A replication window lost by the
// majority's promotion stays inside that bound: it only makes the majority
// start from an older state of the same counter. After the
// heal there is one ring again and the counters still limit: keys held at 0
// before the split, and the hot key, are denied through every node.
// Measure with:
//
//	go test -count=5 -run TestClusterNodeCutOff -v ./test/ | grep admitted
func TestClusterNodeCutOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		pick func(owner string, replicas []string, ids []string) string
	}{
		// The cut node holds nothing of the key: its side starts fresh.
		{"bystander", func(owner string, replicas, ids []string) string {
			for _, id := range ids {
				if !contains(replicas, id) {
					return id
				}
			}
			return ""
		}},
		// The owner is cut off: it keeps its counter, the majority promotes
		// the replica.
		{"owner", func(owner string, _, _ []string) string { return owner }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cutOffRun(t, tc.pick)
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func cutOffRun(t *testing.T, pick func(owner string, replicas, ids []string) string) {
	const (
		burst = 200
		hot   = "apikey:split-hot"
		held  = 30
	)
	c := newFaultyCluster(t, 3)
	c.ApplyRules(splitRules)
	ids := []string{"n1", "n2", "n3"}
	r, err := ring.New(ids, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p := r.Partition(hot)
	victimID := pick(r.PartitionOwner(p), r.PartitionReplicas(p), ids)
	var victim *node.Node
	var rest []*node.Node
	for _, n := range c.Nodes {
		if n.ID() == victimID {
			victim = n
		} else {
			rest = append(rest, n)
		}
	}
	if victim == nil {
		t.Fatalf("no node to cut off (owner %s, replicas %v)", r.PartitionOwner(p), r.PartitionReplicas(p))
	}
	for k := 0; k < held; k++ {
		key := fmt.Sprintf("apikey:held%d", k)
		if res := c.checkOnce(c.Nodes[k%3], key, "exact", 100); !res.Allowed {
			t.Fatalf("spending %s: denied", key)
		}
	}

	// Load on the hot key through every node; each worker stops once its
	// node's side of the split is spent (20 denials in a row after both
	// sides have their own ring), or at its attempt or time cap.
	var (
		allowed, errs       atomic.Int64
		victimAllowed       atomic.Int64
		majorityAfterCut    atomic.Int64
		cut, split          atomic.Bool
		wg                  sync.WaitGroup
		deadline            = time.Now().Add(60 * time.Second)
		checksBeforeIsolate = int64(burst / 2)
		started             atomic.Int64
		isolated            = make(chan struct{})
	)
	entries := c.Live()
	for w := 0; w < 6; w++ {
		n := entries[w%len(entries)]
		cl := c.limiter(n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			streak := 0
			for i := 0; i < 5000 && time.Now().Before(deadline); i++ {
				if started.Add(1) > checksBeforeIsolate {
					<-isolated // the first burst/2 checks run before the cut
				}
				ok, decided := tryCheck(cl, hot, "split")
				if !decided {
					errs.Add(1) // the owner is unreachable until gossip declares it dead
					continue
				}
				if ok {
					allowed.Add(1)
					streak = 0
					if cut.Load() {
						if n == victim {
							victimAllowed.Add(1)
						} else {
							majorityAfterCut.Add(1)
						}
					}
					continue
				}
				if streak++; streak >= 20 && split.Load() {
					return
				}
			}
		}()
	}
	testwait.For(t, 30*time.Second, "the checks before the cut", func() error {
		if a := allowed.Load(); a < checksBeforeIsolate*3/4 {
			return fmt.Errorf("%d allowed", a)
		}
		return nil
	})
	c.Faults.Isolate(victim.ID())
	cut.Store(true)
	close(isolated)
	testwait.For(t, 30*time.Second, "each side of the split to build its own ring", func() error {
		if m := testcluster.InRing(victim); m != 1 {
			return fmt.Errorf("%s still sees %d members", victim.ID(), m)
		}
		for _, n := range rest {
			if m := testcluster.InRing(n); m != 2 {
				return fmt.Errorf("%s still sees %d members", n.ID(), m)
			}
		}
		return nil
	})
	split.Store(true)
	wg.Wait()
	got := allowed.Load()
	t.Logf("cut off %s (key owner %s, replicas %v): admitted %d with burst %d (%+.1f%% over one limit; after the cut: %d via the cut-off node, %d via the others), %d errors, %d packets/dials dropped",
		victim.ID(), r.PartitionOwner(p), r.PartitionReplicas(p), got, burst, float64(got-burst)*100/burst,
		victimAllowed.Load(), majorityAfterCut.Load(), errs.Load(), c.Faults.Drops())
	if limit := int64(2 * burst); got > limit {
		t.Fatalf("admitted %d during a split into two sides, more than 2 × burst = %d", got, limit)
	}
	if victimAllowed.Load() == 0 {
		t.Fatalf("the cut-off node admitted nothing after the cut: it did not keep serving its clients")
	}

	c.Faults.Heal()
	testwait.For(t, 60*time.Second, "one ring on every node after the heal", func() error {
		var ver uint64
		for i, n := range c.Live() {
			if err := n.Ready(); err != nil {
				return fmt.Errorf("%s not ready: %v", n.ID(), err)
			}
			m := n.Members()
			if len(m.Members) != 3 {
				var seen []string
				for _, mem := range m.Members {
					seen = append(seen, mem.ID+"/"+mem.State)
				}
				return fmt.Errorf("%s sees %d members %v", n.ID(), len(m.Members), seen)
			}
			for _, mem := range m.Members {
				if mem.State != "alive" {
					return fmt.Errorf("%s sees %s %s", n.ID(), mem.ID, mem.State)
				}
			}
			if i > 0 && m.RingVersion != ver {
				return fmt.Errorf("%s has ring version %d, another node %d", n.ID(), m.RingVersion, ver)
			}
			ver = m.RingVersion
		}
		return nil
	})
	// Peer connections reconnect (after a backoff of up to a second): every
	// node answers for every key without errors; then the counters must
	// still limit.
	peek := []*weirv1.CheckItem{{Key: hot, Rule: "split", Cost: 0}}
	for k := 0; k < held; k++ {
		peek = append(peek, &weirv1.CheckItem{Key: fmt.Sprintf("apikey:held%d", k), Rule: "exact", Cost: 0})
	}
	testwait.For(t, 30*time.Second, "peer links back", func() error {
		for _, n := range c.Live() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			resp, err := c.limiter(n).Check(ctx, &weirv1.CheckRequest{Items: peek})
			cancel()
			if err != nil {
				return err
			}
			for _, res := range resp.Results {
				if res.ErrorCode != 0 {
					return fmt.Errorf("via %s: %s", n.ID(), res.Error)
				}
			}
		}
		return nil
	})
	for _, n := range c.Live() {
		if res := c.checkOnce(n, hot, "split", 1); res.Allowed {
			t.Fatalf("after the heal, via %s: %s allowed (remaining %d)", n.ID(), hot, res.Remaining)
		}
		for k := 0; k < held; k++ {
			key := fmt.Sprintf("apikey:held%d", k)
			if res := c.checkOnce(n, key, "exact", 1); res.Allowed {
				t.Fatalf("after the heal, via %s: %s allowed again (remaining %d)", n.ID(), key, res.Remaining)
			}
		}
	}
}
