package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/ring"
)

// The hand-off contract a puller relies on to find counters after a run of
// ring changes: the holder hands a partition over once and from then on
// names where it went; a node that never held it hands nothing over but
// gives its replica copies. The callers here are stand-ins ("ghost-*") for
// new owners, so the test sees each answer as a puller would.
func TestHandoffHolderNamesWhereCountersWent(t *testing.T) {
	// One node, then a second that joins and pulls its partitions from
	// the first: two nodes started together take one first ring and hold
	// their partitions provisionally for Settle (handed on as copies).
	c := newCluster(t, 1)
	c.Add()
	c.WaitStable(2)
	c.ApplyRules(exactRules)
	const key = "apikey:handoff"
	owner := c.Nodes[c.ownerOf(key)]
	replica := c.Nodes[1-c.ownerOf(key)]
	if r := c.checkOnce(owner, key, "exact", 100); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("spending: %+v", r)
	}
	r, err := ring.New([]string{owner.ID(), replica.ID()}, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p := r.Partition(key)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Bad requests change nothing.
	for _, req := range []*weirv1.HandoffRequest{
		{To: "", Partitions: []uint32{p}},
		{To: owner.ID(), Partitions: []uint32{p}},
		{To: "ghost-0", Partitions: []uint32{p, 1 << 20}},
	} {
		_, err := testcluster.PeerClient(t, owner.GRPCAddr()).Handoff(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("handoff %v: got %v, want InvalidArgument", req, err)
		}
	}

	// The replica holds a copy, not the counters. Asking it changes nothing.
	testwait.For(t, 5*time.Second, "replica copy of the spent key", func() error {
		resp, err := testcluster.PeerClient(t, replica.GRPCAddr()).Handoff(ctx, &weirv1.HandoffRequest{To: "ghost-0", Partitions: []uint32{p}})
		if err != nil {
			return err
		}
		if len(resp.Held) != 0 || len(resp.States) != 0 {
			return fmt.Errorf("a replica answered as a holder: %v", resp)
		}
		// It may name the owner: it held the partition until the owner
		// joined and pulled it.
		for _, m := range resp.Moved {
			if m.To != owner.ID() {
				return fmt.Errorf("the replica says partition %d went to %s, not to its owner %s", m.Partition, m.To, owner.ID())
			}
		}
		if len(resp.Copies) == 0 {
			return fmt.Errorf("no copy yet")
		}
		return nil
	})

	first, err := testcluster.PeerClient(t, owner.GRPCAddr()).Handoff(ctx, &weirv1.HandoffRequest{To: "ghost-1", Partitions: []uint32{p}})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Held) != 1 || first.Held[0] != p || len(first.States) == 0 || len(first.Moved) != 0 {
		t.Fatalf("first hand-off of partition %d: held %v, %d states, moved %v", p, first.Held, len(first.States), first.Moved)
	}
	for _, st := range first.States {
		if st.Partition != p {
			t.Fatalf("state of partition %d in a hand-off of %d", st.Partition, p)
		}
	}

	// Asked again, the old holder hands over nothing and names the puller,
	// so a node whose ring skipped "ghost-1" follows the counters there.
	second, err := testcluster.PeerClient(t, owner.GRPCAddr()).Handoff(ctx, &weirv1.HandoffRequest{To: "ghost-2", Partitions: []uint32{p}})
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Held) != 0 || len(second.States) != 0 {
		t.Fatalf("second hand-off handed over %v (%d states): the counters would exist twice", second.Held, len(second.States))
	}
	if len(second.Moved) != 1 || second.Moved[0].Partition != p || second.Moved[0].To != "ghost-1" {
		t.Fatalf("second hand-off: moved %v, want partition %d to ghost-1", second.Moved, p)
	}
}

// A peer whose ring differs (it saw a join this node has not) forwards an
// item to a node that neither owns nor holds the key's partition. That node
// must not decide it on empty counters: it passes the item on to the owner
// by its own ring, once (items carry a hop count, so they cannot bounce
// between nodes for ever).
func TestForwardedItemAtNonHolderReachesTheCounters(t *testing.T) {
	c := newCluster(t, 3)
	c.ApplyRules(exactRules)
	const key = "apikey:stray"
	oi := c.ownerOf(key)
	owner := c.Nodes[oi]
	if r := c.checkOnce(owner, key, "exact", 100); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("spending: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, n := range c.Nodes {
		if i == oi {
			continue
		}
		// As a forwarded item, as the stray peer would send it.
		resp, err := testcluster.PeerClient(t, n.GRPCAddr()).Forward(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: key, Rule: "exact", Cost: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.Results[0]; r.ErrorCode != 0 || r.Allowed {
			t.Fatalf("forwarded to %s (not the owner %s): %+v; the spent key was decided on empty counters", n.ID(), owner.ID(), r)
		}
	}
}
