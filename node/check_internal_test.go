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

// forwardItems raises the rule version on its copies and leaves the
// caller's items as they were; items already at or past the version keep
// theirs.
func TestForwardItemsDoesNotMutate(t *testing.T) {
	items := []limit.Item{
		{Key: "apikey:a", Rule: "r", Cost: 2, Group: 3, RuleVersion: 0},
		{Key: "apikey:b", Rule: "r", Cost: 1, Refund: true, RuleVersion: 9},
		{Key: "apikey:c", Rule: "s", Cost: 0, RuleVersion: 4},
	}
	before := slices.Clone(items)
	sub := forwardItems(items, []int{2, 0, 1}, 7, false)
	if len(sub) != 3 {
		t.Fatalf("got %d items, want 3", len(sub))
	}
	if !slices.Equal(items, before) {
		t.Errorf("caller's items changed: %+v, want %+v", items, before)
	}
	for j, want := range []struct {
		key       string
		ver       uint64
		cost      int64
		group     uint32
		refund    bool
		fromIndex int
	}{
		{"apikey:c", 7, 0, 0, false, 2},
		{"apikey:a", 7, 2, 3, false, 0},
		{"apikey:b", 9, 1, 0, true, 1},
	} {
		got := sub[j]
		if got.Key != want.key || got.RuleVersion != want.ver || got.Cost != want.cost || got.Group != want.group || got.Refund != want.refund || got.Rule != items[want.fromIndex].Rule {
			t.Errorf("sub[%d] = %+v, want key %s version %d cost %d group %d refund %v", j, got, want.key, want.ver, want.cost, want.group, want.refund)
		}
	}
	sub[0].Key = "changed"
	if items[2].Key != "apikey:c" {
		t.Error("forwardItems shares storage with the caller's items")
	}
}

// A forwarded item goes on with one more hop; a caller's hop count is
// ignored (only nodes set it). Either way the caller's item is not changed.
func TestForwardItemsCountsHops(t *testing.T) {
	items := []limit.Item{
		{Key: "apikey:a", Rule: "r", Cost: 1, RuleVersion: 3},
		{Key: "apikey:b", Rule: "r", Cost: 1, RuleVersion: 3, Hops: 5},
	}
	before := slices.Clone(items)
	for _, tc := range []struct {
		forwarded bool
		want      []uint32
	}{
		{false, []uint32{0, 0}},
		{true, []uint32{1, 6}},
	} {
		sub := forwardItems(items, []int{0, 1}, 2, tc.forwarded)
		for j, it := range sub {
			if it.Hops != tc.want[j] || it.RuleVersion != 3 || it.Key != items[j].Key {
				t.Errorf("forwarded=%v: sub[%d] = %+v, want hops %d version 3", tc.forwarded, j, it, tc.want[j])
			}
		}
	}
	if !slices.Equal(items, before) {
		t.Fatalf("caller's items changed: %+v", items)
	}
}

// Two callers' items coalesced into one forward keep their groups apart:
// the owner decides the batch as one Check, where a shared id would make
// unrelated requests all-or-nothing together.
func TestForwardBatchRenumbersGroups(t *testing.T) {
	a := &fwdCall{items: []limit.Item{{Key: "k1", Rule: "r", Cost: 1, Group: 1}, {Key: "k2", Rule: "r", Cost: 1, Group: 1}, {Key: "k3", Rule: "r", Cost: 1}}}
	b := &fwdCall{items: []limit.Item{{Key: "k4", Rule: "r", Cost: 1, Group: 1}, {Key: "k5", Rule: "r", Cost: 1, Group: 7}}}
	many := &fwdCall{}
	for i := range 20 {
		many.items = append(many.items, limit.Item{Key: "m", Rule: "r", Cost: 1, Group: uint32(100 + i%10)})
	}
	var w wireItems
	got := w.set([]*fwdCall{a, b, many})
	var groups []uint32
	for _, it := range got {
		groups = append(groups, it.GetGroup())
	}
	want := []uint32{1, 1, 0, 2, 3}
	for i := range 20 {
		want = append(want, uint32(4+i%10))
	}
	if !slices.Equal(groups, want) {
		t.Fatalf("groups %v, want %v", groups, want)
	}
}

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
