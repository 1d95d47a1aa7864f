package membership

import (
	"slices"
	"strings"
	"testing"

	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/ring"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// replicaPeers is each partition's replica list without this node, in the
// ring's order.
func TestReplicaPeers(t *testing.T) {
	r, err := ring.New([]string{"a", "b", "c", "d"}, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	peers := replicaPeers(r, "b")
	if len(peers) != r.PartitionCount() {
		t.Fatalf("%d partitions, want %d", len(peers), r.PartitionCount())
	}
	withSelf := 0
	for p, got := range peers {
		all := r.PartitionReplicas(uint32(p))
		want := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id == "b" })
		if len(want) < len(all) {
			withSelf++
		}
		if !slices.Equal(got, want) {
			t.Fatalf("partition %d: %v, want %v (replicas %v)", p, got, want, all)
		}
	}
	if withSelf == 0 {
		t.Fatal("no partition had this node among its replicas: the test proves nothing")
	}
}

// A view answers the router's questions (replication.View) and the
// forwarders' (a member's gRPC address) from its ring and members.
func TestViewAnswersFromRingAndMembers(t *testing.T) {
	r, err := ring.New([]string{"a", "b"}, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	v := &View{Ring: r, Members: map[string]clusterview.Member{"a": {ID: "a", GRPC: "10.0.0.1:9090"}, "b": {ID: "b"}}}
	for p := range uint32(r.PartitionCount()) {
		if got, want := v.PartitionOwner(p), r.PartitionOwner(p); got != want {
			t.Fatalf("partition %d: owner %q, want %q", p, got, want)
		}
	}
	if !v.Member("a") || !v.Member("b") || v.Member("c") {
		t.Error("Member disagrees with the member set")
	}
	if addr, ok := v.Addr("a"); !ok || addr != "10.0.0.1:9090" {
		t.Errorf("Addr(a) = %q, %v", addr, ok)
	}
	if _, ok := v.Addr("b"); ok {
		t.Error("a member without a gRPC address has one")
	}
	if _, ok := v.Addr("c"); ok {
		t.Error("a non-member has an address")
	}
}

// A node gossips every rule feature of its binary but those left out.
func TestAdvertisedFeatures(t *testing.T) {
	all := rules.Features()
	if len(all) == 0 {
		t.Fatal("no rule features: the test proves nothing")
	}
	if got := AdvertisedFeatures(nil); got != strings.Join(all, ",") {
		t.Errorf("AdvertisedFeatures(nil) = %q, want %q", got, strings.Join(all, ","))
	}
	if got, want := AdvertisedFeatures(all[:1]), strings.Join(all[1:], ","); got != want {
		t.Errorf("AdvertisedFeatures(%v) = %q, want %q", all[:1], got, want)
	}
}
