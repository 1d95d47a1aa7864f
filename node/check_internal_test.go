package node

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/node/membership"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
)

// A check pins the partitions it routed here; one handed off since then is
// rerouted after its counters (replication.Router.Reroute), all its items
// together, and an item at the hop limit is answered unavailable instead.
// The rest stay local, pinned until the check unpins them.
func TestPinReroutesPartitionsHandedOff(t *testing.T) {
	ctx := context.Background()
	r, err := ring.New([]string{"a"}, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	eng, err := shard.New(shard.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	t.Cleanup(eng.Close)
	h, err := replication.NewHandoff(replication.DefaultHandoffConfig("a", r.PartitionCount()), eng, noPeers{}, replication.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- h.Run(hctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Error(err)
		}
	})
	if err := h.ChangeRing(ctx, replication.RingChanged{Place: clusterview.Assignments(r), Members: []string{"a"}, Live: map[string]string{"a": ""}}); err != nil {
		t.Fatal(err)
	}
	const kept, lost = 3, 7
	if _, err := h.Serve(ctx, replication.HandoffRequest{To: "c", Parts: []uint32{lost}}); err != nil {
		t.Fatal(err)
	}

	v := &membership.View{Ring: r, Members: map[string]member{"a": {ID: "a"}}}
	rt := replication.Router{Self: "a", Table: h.Routes(), View: v}
	items := []limit.Item{{Key: "k0"}, {Key: "k1"}, {Key: "k2", Hops: replication.MaxHops}, {Key: "k3"}}
	res := make([]limit.Result, len(items))
	sc := &checkScratch{
		local: []shard.Item{{Partition: lost}, {Partition: kept}, {Partition: lost}, {Partition: kept}},
		idx:   []int{0, 1, 2, 3},
	}
	remote := sc.pin(h, &rt, r.PartitionCount(), items, res, true, nil)
	if got := remote["c"]; len(remote) != 1 || !slices.Equal(got, []int{0}) {
		t.Errorf("forwarded %v, want item 0 to c", remote)
	}
	if res[2].Code != limit.CodeUnavailable || res[2].Err == "" {
		t.Errorf("item at the hop limit: %+v, want unavailable", res[2])
	}
	if !slices.Equal(sc.idx, []int{1, 3}) || len(sc.local) != 2 || !slices.Equal(sc.pinned, []uint32{kept}) {
		t.Errorf("local part: items %v pinned %v, want items [1 3], pinned [%d]", sc.idx, sc.pinned, kept)
	}
	sc.unpin(h)
	if slices.ContainsFunc(sc.seen, func(s uint8) bool { return s != 0 }) {
		t.Error("scratch marks left after unpin")
	}
	// Unpinned: a hand-off of the kept partition is not held off.
	if _, err := h.Serve(ctx, replication.HandoffRequest{To: "c", Parts: []uint32{kept}}); err != nil {
		t.Fatal(err)
	}
}

// noPeers answers no hand-off: the test's node is alone.
type noPeers struct{}

func (noPeers) Handoff(context.Context, string, replication.HandoffRequest) (replication.HandoffReply, error) {
	return replication.HandoffReply{}, errors.New("no peers in this test")
}
