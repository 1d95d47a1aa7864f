package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/tlsconf"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// allPartitions is every partition of the default ring.
func allPartitions() []uint32 {
	ps := make([]uint32, 271)
	for i := range ps {
		ps[i] = uint32(i)
	}
	return ps
}

// TestIdentityNonMemberNodeCertOnPeer: a node certificate from the cluster
// CA for n9, which never joined, cannot take partitions with Peer.Handoff
// (PermissionDenied at every node, asked three times) nor forward checks;
// a member's certificate cannot ask for partitions it neither owns nor
// holds. Checks keep working through every node with their counters
// intact. (Before identities were bound to membership, the Handoff asks
// took the counters and made every check fail "owner n9 unreachable".)
func TestIdentityNonMemberNodeCertOnPeer(t *testing.T) {
	c := testcluster.NewWith(t, 3, testcluster.Options{TLS: true})
	c.ApplyRules(tlsRules)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys := make([]*weirv1.CheckItem, 40)
	for i := range keys {
		keys[i] = &weirv1.CheckItem{Key: fmt.Sprintf("apikey:id%d", i), Rule: "tls.r", Cost: 7}
	}
	gw := weirv1.NewLimiterClient(grpcConn(t, c.Live()[0].GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleGateway, "g1"))))
	resp, err := gw.Check(ctx, &weirv1.CheckRequest{Items: keys})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, len(keys))
	for i, r := range resp.Results {
		if r.GetError() != "" || !r.Allowed {
			t.Fatalf("%s: %+v", keys[i].Key, r)
		}
		want[i] = r.Remaining
	}

	n9 := c.PKI.ClientTLS(tlsconf.RoleNode, "n9")
	for round := 0; round < 3; round++ {
		for _, n := range c.Live() {
			peer := weirv1.NewPeerClient(grpcConn(t, n.GRPCAddr(), tlsCreds(n9)))
			if _, err := peer.Handoff(ctx, &weirv1.HandoffRequest{To: "n9", Partitions: allPartitions()}); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("Handoff to n9 at %s: %v, want PermissionDenied", n.ID(), err)
			}
			if _, err := peer.Forward(ctx, &weirv1.CheckRequest{Items: keys[:1]}); status.Code(err) != codes.PermissionDenied {
				t.Errorf("Forward from n9 at %s: %v, want PermissionDenied", n.ID(), err)
			}
			if _, err := peer.Replicate(ctx, &weirv1.ReplicateRequest{From: "n9", States: []*weirv1.CounterState{{Id: 1, Partition: 1}}}); status.Code(err) != codes.PermissionDenied {
				t.Errorf("Replicate from n9 at %s: %v, want PermissionDenied", n.ID(), err)
			}
		}
	}
	// A member asking for every partition: it holds only its share.
	n1, n2 := c.Live()[0], c.Live()[1]
	asMember := weirv1.NewPeerClient(grpcConn(t, n1.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleNode, n2.ID()))))
	if _, err := asMember.Handoff(ctx, &weirv1.HandoffRequest{To: n2.ID(), Partitions: allPartitions()}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Handoff of every partition to member %s: %v, want PermissionDenied", n2.ID(), err)
	}

	for i := range keys {
		keys[i].Cost = 0
	}
	for _, n := range c.Live() {
		lim := weirv1.NewLimiterClient(grpcConn(t, n.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleGateway, "g1"))))
		resp, err := lim.Check(ctx, &weirv1.CheckRequest{Items: keys})
		if err != nil {
			t.Fatalf("check through %s: %v", n.ID(), err)
		}
		for i, r := range resp.Results {
			if r.GetError() != "" || r.Remaining != want[i] {
				t.Errorf("through %s, %s: remaining %d (err %q), want %d", n.ID(), keys[i].Key, r.Remaining, r.GetError(), want[i])
			}
		}
	}
}
