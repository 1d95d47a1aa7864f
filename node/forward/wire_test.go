package forward

import (
	"slices"
	"testing"

	"github.com/weirlimit/weir/limit"
)

// appendItems raises the rule version on its copies and leaves the
// caller's items as they were; items already at or past the version keep
// theirs.
func TestAppendItemsDoesNotMutate(t *testing.T) {
	items := []limit.Item{
		{Key: "apikey:a", Rule: "r", Cost: 2, Group: 3, RuleVersion: 0},
		{Key: "apikey:b", Rule: "r", Cost: 1, Refund: true, RuleVersion: 9},
		{Key: "apikey:c", Rule: "s", Cost: 0, RuleVersion: 4},
	}
	before := slices.Clone(items)
	sub := appendItems(nil, items, []int{2, 0, 1}, 7, false)
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
		t.Error("appendItems shares storage with the caller's items")
	}
}

// A forwarded item goes on with one more hop; a caller's hop count is
// ignored (only nodes set it). Either way the caller's item is not changed.
func TestAppendItemsCountsHops(t *testing.T) {
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
		sub := appendItems(nil, items, []int{0, 1}, 2, tc.forwarded)
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
	a := &Call{items: []limit.Item{{Key: "k1", Rule: "r", Cost: 1, Group: 1}, {Key: "k2", Rule: "r", Cost: 1, Group: 1}, {Key: "k3", Rule: "r", Cost: 1}}}
	b := &Call{items: []limit.Item{{Key: "k4", Rule: "r", Cost: 1, Group: 1}, {Key: "k5", Rule: "r", Cost: 1, Group: 7}}}
	many := &Call{}
	for i := range 20 {
		many.items = append(many.items, limit.Item{Key: "m", Rule: "r", Cost: 1, Group: uint32(100 + i%10)})
	}
	var w wireItems
	got := w.set([]*Call{a, b, many})
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
