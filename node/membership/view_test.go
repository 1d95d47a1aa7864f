package membership

import (
	"slices"
	"testing"

	"github.com/weirlimit/weir/ring"
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
