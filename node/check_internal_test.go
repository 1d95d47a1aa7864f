package node

import (
	"testing"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// forwardItems raises the rule version on copies and leaves the caller's
// items as they were; items already at or past the version go as they are.
func TestForwardItemsDoesNotMutate(t *testing.T) {
	items := []*weirv1.CheckItem{
		{Key: "apikey:a", Rule: "r", Cost: 2, Group: 3, RuleVersion: 0},
		{Key: "apikey:b", Rule: "r", Cost: 1, Refund: true, RuleVersion: 9},
		{Key: "apikey:c", Rule: "s", Cost: 0, RuleVersion: 4},
	}
	sub := forwardItems(items, []int{2, 0, 1}, 7, false)
	if len(sub) != 3 {
		t.Fatalf("got %d items, want 3", len(sub))
	}
	for i, want := range []uint64{0, 9, 4} {
		if items[i].RuleVersion != want {
			t.Errorf("caller's item %d: RuleVersion changed to %d, want %d", i, items[i].RuleVersion, want)
		}
	}
	for j, want := range []struct {
		key       string
		ver       uint64
		sameItem  bool
		cost      int64
		group     uint32
		refund    bool
		fromIndex int
	}{
		{"apikey:c", 7, false, 0, 0, false, 2},
		{"apikey:a", 7, false, 2, 3, false, 0},
		{"apikey:b", 9, true, 1, 0, true, 1},
	} {
		got := sub[j]
		if got.Key != want.key || got.RuleVersion != want.ver || got.Cost != want.cost || got.Group != want.group || got.Refund != want.refund || got.Rule != items[want.fromIndex].Rule {
			t.Errorf("sub[%d] = %v, want key %s version %d cost %d group %d refund %v", j, got, want.key, want.ver, want.cost, want.group, want.refund)
		}
		if (got == items[want.fromIndex]) != want.sameItem {
			t.Errorf("sub[%d]: same item as the caller's = %v, want %v", j, got == items[want.fromIndex], want.sameItem)
		}
	}
}

// A forwarded item goes on with one more hop; a caller's hop count is
// ignored (only nodes set it). Either way the caller's item is not changed.
func TestForwardItemsCountsHops(t *testing.T) {
	items := []*weirv1.CheckItem{
		{Key: "apikey:a", Rule: "r", Cost: 1, RuleVersion: 3},
		{Key: "apikey:b", Rule: "r", Cost: 1, RuleVersion: 3, Hops: 5},
	}
	for _, tc := range []struct {
		forwarded bool
		want      []uint32
		same      []bool
	}{
		{false, []uint32{0, 0}, []bool{true, false}},
		{true, []uint32{1, 6}, []bool{false, false}},
	} {
		sub := forwardItems(items, []int{0, 1}, 2, tc.forwarded)
		for j, it := range sub {
			if it.Hops != tc.want[j] || it.RuleVersion != 3 || it.Key != items[j].Key {
				t.Errorf("forwarded=%v: sub[%d] = %v, want hops %d version 3", tc.forwarded, j, it, tc.want[j])
			}
			if (it == items[j]) != tc.same[j] {
				t.Errorf("forwarded=%v: sub[%d] is the caller's item = %v, want %v", tc.forwarded, j, it == items[j], tc.same[j])
			}
		}
	}
	if items[0].Hops != 0 || items[1].Hops != 5 {
		t.Fatalf("caller's items changed: %v", items)
	}
}

// Results come in one block, each distinct and empty.
func TestNewResults(t *testing.T) {
	res := newResults(3)
	if len(res) != 3 || res[0] == res[1] || res[1] == res[2] {
		t.Fatalf("newResults(3) = %v", res)
	}
	for _, r := range res {
		if r.Allowed || r.ErrorCode != 0 || r.Remaining != 0 {
			t.Fatalf("result not empty: %v", r)
		}
	}
}
