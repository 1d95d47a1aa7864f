package clusterview

import (
	"slices"
	"testing"
)

func TestBootstrap(t *testing.T) {
	member := func(id string, inGroup bool) Member { return Member{ID: id, Raft: id + ":raft", InGroup: inGroup} }
	three := map[string]Member{"b1": member("b1", false), "b2": member("b2", false), "b3": member("b3", false)}
	for _, tc := range []struct {
		name    string
		self    string
		expect  int
		members map[string]Member
		ids     []string
		formed  bool
	}{
		{"too few", "b1", 3, map[string]Member{"b1": member("b1", false), "b2": member("b2", false)}, nil, false},
		{"enough: the first by id", "b2", 2, three, []string{"b1", "b2"}, false},
		{"a new cluster of three", "b3", 3, three, []string{"b1", "b2", "b3"}, false},
		// issue 32: a late node whose id sorts first bootstrapped
		// {a1, b1, b2}, a second configuration.
		{"late node, group formed", "a1", 3, map[string]Member{"a1": member("a1", false), "b1": member("b1", true), "b2": member("b2", true), "b3": member("b3", true)}, nil, true},
		{"self in group only", "b1", 3, map[string]Member{"b1": member("b1", true), "b2": member("b2", false), "b3": member("b3", false)}, []string{"b1", "b2", "b3"}, false},
		{"no raft address", "b1", 3, map[string]Member{"b1": member("b1", false), "b2": member("b2", false), "b3": {ID: "b3"}}, nil, false},
	} {
		ids, formed := Bootstrap(tc.self, tc.expect, tc.members)
		if !slices.Equal(ids, tc.ids) || formed != tc.formed {
			t.Errorf("%s: Bootstrap = %v, %v; want %v, %v", tc.name, ids, formed, tc.ids, tc.formed)
		}
	}
}
