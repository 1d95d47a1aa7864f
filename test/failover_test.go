package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/node"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/ring"
)

// ownerOf computes the owner of key from the live members, as every node does.
func (c *cluster) ownerOf(key string) int {
	c.t.Helper()
	var ids []string
	for _, n := range c.Live() {
		ids = append(ids, n.ID())
	}
	r, err := ring.New(ids, ring.DefaultConfig())
	if err != nil {
		c.t.Fatal(err)
	}
	o := r.Owner(key)
	for i, n := range c.Nodes {
		if n != nil && n.ID() == o {
			return i
		}
	}
	c.t.Fatalf("owner %s not found", o)
	return -1
}

func (c *cluster) checkOnce(n *node.Node, key, rule string, cost int64) *weirv1.CheckResult {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.limiter(n).Check(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: key, Rule: rule, Cost: cost}}})
	if err != nil {
		c.t.Fatalf("check %s via %s: %v", key, n.ID(), err)
	}
	r := resp.Results[0]
	if r.ErrorCode != 0 {
		c.t.Fatalf("check %s via %s: %s", key, n.ID(), r.Error)
	}
	return r
}

// tryCheck asks for one token of key under rule; decided is false when the
// cluster did not answer it (an RPC error or an item error), after a short
// pause so a loop over it does not spin during a failover.
func tryCheck(cl weirv1.LimiterClient, key, rule string) (allowed, decided bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resp, err := cl.Check(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: key, Rule: rule, Cost: 1}}})
	if err != nil || resp.Results[0].ErrorCode != 0 {
		time.Sleep(time.Millisecond)
		return false, false
	}
	return resp.Results[0].Allowed, true
}

// A key held at 0 remaining stays limited when a node joins and when a node
// leaves gracefully: no counter returns to full because the ring changed.
func TestClusterJoinAndLeaveKeepCounters(t *testing.T) {
	c := newCluster(t, 3)
	c.ApplyRules(exactRules)
	const keys = 60
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("apikey:k%d", k)
		if r := c.checkOnce(c.Nodes[k%3], key, "exact", 100); !r.Allowed {
			t.Fatalf("spending %s: denied", key)
		}
	}
	assertAllDenied := func(stage string) {
		t.Helper()
		live := c.Live()
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("apikey:k%d", k)
			if r := c.checkOnce(live[k%len(live)], key, "exact", 1); r.Allowed {
				t.Fatalf("%s: %s was allowed again (remaining %d): its counter was reset", stage, key, r.Remaining)
			}
		}
	}
	assertAllDenied("before")

	c.Add()
	c.WaitStable(4)
	assertAllDenied("after join")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.Nodes[1].Leave(ctx); err != nil {
		t.Fatalf("leave: %v", err)
	}
	left := c.Nodes[1].ID()
	c.Kill(1)
	c.WaitStable(3)
	assertAllDenied("after graceful leave")
	for _, n := range c.Live() {
		if st := memberState(n, left); st != "left" {
			t.Errorf("%s lists %s as %q after its graceful leave, want \"left\"", n.ID(), left, st)
		}
	}
}

// Nodes that join one right after another pass partitions along a chain
// (n1 → n2 → n3 …) while earlier pulls are still running. Counters spent
// before the joins stay spent, whichever node a check enters by.
func TestClusterBackToBackJoinsKeepCounters(t *testing.T) {
	c := newCluster(t, 1)
	c.ApplyRules(exactRules)
	const keys = 40
	for k := 0; k < keys; k++ {
		if r := c.checkOnce(c.Nodes[0], fmt.Sprintf("apikey:j%d", k), "exact", 100); !r.Allowed {
			t.Fatalf("spending key %d: denied", k)
		}
	}
	for i := 0; i < 4; i++ {
		c.Add()
	}
	c.WaitStable(5)
	for _, n := range c.Live() {
		for k := 0; k < keys; k++ {
			if r := c.checkOnce(n, fmt.Sprintf("apikey:j%d", k), "exact", 1); r.Allowed {
				t.Fatalf("via %s: key %d allowed again (remaining %d): its counter was lost in a hand-off", n.ID(), k, r.Remaining)
			}
		}
	}
}

// The owner of a hot key is killed under load. Its replica is promoted; the
// decrements lost are those of the unshipped replication window (decisions
// of the last ReplicationInterval plus the replication RPC in flight). At the
// ~3,000 checks/s of this test that measured +0.3% to +1.9% over 12 runs
// (4 of them beside other test packages); the asserted bound is 5%. Without
// promotion the key would restart at full burst (+50% here).
func TestClusterOwnerKilledUnderLoad(t *testing.T) {
	c := newCluster(t, 3)
	c.ApplyRules(`
rules:
  - id: big
    match: {route: /big}
    key: apikey
    rate: 1
    period: 1h
    burst: 1000
`)
	const key = "apikey:victim"
	owner := c.ownerOf(key)
	var entry []*node.Node
	for i, n := range c.Nodes {
		if i != owner {
			entry = append(entry, n)
		}
	}
	var allowed, errs, attempts atomic.Int64
	var killOnce sync.Once
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		cl := c.limiter(entry[w%len(entry)])
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(20 * time.Second)
			for attempts.Load() < 3000 && time.Now().Before(deadline) {
				ok, decided := tryCheck(cl, key, "big")
				if !decided {
					errs.Add(1) // the owner is unreachable until gossip declares it dead
					continue
				}
				attempts.Add(1)
				if ok {
					if allowed.Add(1) == 500 {
						killOnce.Do(func() { go c.Kill(owner) })
					}
				}
			}
		}()
	}
	wg.Wait()
	got := allowed.Load()
	t.Logf("owner killed after 500 admitted: admitted %d of burst 1000 (%+.1f%%), %d errors during failover", got, float64(got-1000)/10, errs.Load())
	if got > 1050 {
		t.Fatalf("admitted %d, more than burst 1000 + 5%%", got)
	}
	if got < 1000 && errs.Load() == 0 {
		t.Fatalf("admitted %d < 1000 with no errors: tokens were lost", got)
	}
}

// A node joins under load. The partitions it takes over are pulled from
// their previous owners before it answers for them, so no counter restarts
// at full burst. The bound asserted is +2% over the burst per key (a
// hand-off waits for the checks deciding the partition before it exports,
// so exactly the burst is expected; docs/design.md, hand-off).
func TestClusterNodeAddedUnderLoad(t *testing.T) {
	c := newCluster(t, 3)
	c.ApplyRules(`
rules:
  - id: big
    match: {route: /big}
    key: apikey
    rate: 1
    period: 1h
    burst: 200
`)
	const keys, burst = 24, 200
	var allowed [keys]atomic.Int64
	var total, errs, attempts atomic.Int64
	var joinOnce sync.Once
	joined := make(chan *node.Node, 1)
	var wg sync.WaitGroup
	nodes := c.Live()
	for w := 0; w < 8; w++ {
		cl := c.limiter(nodes[w%len(nodes)])
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(30 * time.Second)
			for i := w; attempts.Load() < 2*keys*burst && time.Now().Before(deadline); i += 8 {
				k := i % keys
				ok, decided := tryCheck(cl, fmt.Sprintf("apikey:join%d", k), "big")
				if !decided {
					errs.Add(1)
					continue
				}
				attempts.Add(1)
				if ok {
					allowed[k].Add(1)
					if total.Add(1) == keys*burst/2 {
						joinOnce.Do(func() { go func() { joined <- c.Add() }() })
					}
				}
			}
		}()
	}
	wg.Wait()
	var n4 *node.Node
	select {
	case n4 = <-joined:
	case <-time.After(30 * time.Second):
		t.Fatal("the fourth node did not start")
	}
	c.WaitStable(4)
	moved, worst := 0, int64(0)
	for k := range keys {
		got := allowed[k].Load()
		worst = max(worst, got-burst)
		if c.ownerOf(fmt.Sprintf("apikey:join%d", k)) == len(c.Nodes)-1 {
			moved++
		}
		if got > burst+burst*2/100 {
			t.Errorf("key %d admitted %d, more than burst %d + 2%%", k, got, burst)
		}
	}
	t.Logf("node %s joined after %d admitted: %d of %d keys moved to it; admitted %d of %d (worst key %+d), %d errors",
		n4.ID(), keys*burst/2, moved, keys, total.Load(), keys*burst, worst, errs.Load())
	if moved == 0 {
		t.Fatalf("no key moved to the new node: the test did not exercise a hand-off")
	}
	// A key spent during the run stays spent on every node, the new one
	// included.
	for k := range keys {
		if allowed[k].Load() < burst {
			continue // the run ended (its time bound) before this key was spent
		}
		for _, n := range c.Live() {
			if r := c.checkOnce(n, fmt.Sprintf("apikey:join%d", k), "big", 1); r.Allowed {
				t.Fatalf("key %d allowed again via %s after the join", k, n.ID())
			}
		}
	}
}
