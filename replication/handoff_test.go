package replication

import (
	"reflect"
	"testing"
)

func TestPlanHandoff(t *testing.T) {
	aliveExcept := func(dead ...string) func(string) bool {
		return func(id string) bool {
			for _, d := range dead {
				if id == d {
					return false
				}
			}
			return true
		}
	}
	type want struct {
		gain        []Source
		lose        []uint32
		dropReplica []uint32
	}
	for _, tc := range []struct {
		name  string
		self  string
		moves []Move
		alive func(string) bool
		want  want
	}{
		{
			name:  "owner dies, self was first replica: promote the local copy",
			self:  "b",
			moves: []Move{{Partition: 7, OldOwner: "a", NewOwner: "b", OldReplicas: []string{"a", "b", "c"}, NewReplicas: []string{"b", "c", "d"}}},
			alive: aliveExcept("a"),
			want:  want{gain: []Source{{Partition: 7, From: []string{"b", "c"}}}},
		},
		{
			name:  "owner dies, self was not a replica: ask the surviving replicas in order",
			self:  "d",
			moves: []Move{{Partition: 7, OldOwner: "a", NewOwner: "d", OldReplicas: []string{"a", "b", "c"}, NewReplicas: []string{"d", "b", "c"}}},
			alive: aliveExcept("a", "b"),
			want:  want{gain: []Source{{Partition: 7, From: []string{"c"}}}},
		},
		{
			name:  "owner and all replicas dead: fresh counters",
			self:  "d",
			moves: []Move{{Partition: 1, OldOwner: "a", NewOwner: "d", OldReplicas: []string{"a", "b"}, NewReplicas: []string{"d"}}},
			alive: aliveExcept("a", "b"),
			want:  want{gain: []Source{{Partition: 1, From: nil}}},
		},
		{
			name: "self joins: take from the live old owner first, then its replicas",
			self: "n",
			moves: []Move{
				{Partition: 3, OldOwner: "a", NewOwner: "n", OldReplicas: []string{"a", "b", "c"}, NewReplicas: []string{"n", "a", "b"}},
				{Partition: 5, OldOwner: "b", NewOwner: "b", OldReplicas: []string{"b", "c", "a"}, NewReplicas: []string{"b", "n", "c"}},
			},
			alive: aliveExcept(),
			want:  want{gain: []Source{{Partition: 3, From: []string{"a", "b", "c"}}}},
		},
		{
			name: "another node joins: self loses one partition and one replica",
			self: "a",
			moves: []Move{
				{Partition: 3, OldOwner: "a", NewOwner: "n", OldReplicas: []string{"a", "b", "c"}, NewReplicas: []string{"n", "a", "b"}},
				{Partition: 4, OldOwner: "b", NewOwner: "n", OldReplicas: []string{"b", "a", "c"}, NewReplicas: []string{"n", "b", "c"}},
				{Partition: 6, OldOwner: "c", NewOwner: "c", OldReplicas: []string{"c", "a"}, NewReplicas: []string{"c", "n"}},
			},
			alive: aliveExcept(),
			want:  want{lose: []uint32{3}, dropReplica: []uint32{4, 6}},
		},
		{
			name: "self leaves gracefully: it loses what it owned; replicas promoted elsewhere",
			self: "a",
			moves: []Move{
				{Partition: 0, OldOwner: "a", NewOwner: "b", OldReplicas: []string{"a", "b"}, NewReplicas: []string{"b", "c"}},
				{Partition: 2, OldOwner: "c", NewOwner: "c", OldReplicas: []string{"c", "a"}, NewReplicas: []string{"c", "b"}},
			},
			alive: aliveExcept(),
			want:  want{lose: []uint32{0}, dropReplica: []uint32{2}},
		},
		{
			name: "another node leaves: self promoted from replica, gains a replica role",
			self: "b",
			moves: []Move{
				{Partition: 0, OldOwner: "a", NewOwner: "b", OldReplicas: []string{"a", "b"}, NewReplicas: []string{"b", "c"}},
				{Partition: 9, OldOwner: "c", NewOwner: "c", OldReplicas: []string{"c", "a"}, NewReplicas: []string{"c", "b"}},
			},
			alive: aliveExcept(),
			want:  want{gain: []Source{{Partition: 0, From: []string{"a", "b"}}}},
		},
		{
			name:  "owner demoted to replica: it loses ownership, keeps nothing to drop",
			self:  "a",
			moves: []Move{{Partition: 8, OldOwner: "a", NewOwner: "b", OldReplicas: []string{"a", "b"}, NewReplicas: []string{"b", "a"}}},
			alive: aliveExcept(),
			want:  want{lose: []uint32{8}},
		},
		{
			name:  "first ring: self owns a partition nobody held",
			self:  "a",
			moves: []Move{{Partition: 1, OldOwner: "", NewOwner: "a", NewReplicas: []string{"a", "b"}}},
			alive: aliveExcept(),
			want:  want{gain: []Source{{Partition: 1}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gain, lose, drop := PlanHandoff(tc.self, tc.moves, tc.alive)
			if !reflect.DeepEqual(gain, tc.want.gain) {
				t.Errorf("gain = %+v, want %+v", gain, tc.want.gain)
			}
			if !reflect.DeepEqual(lose, tc.want.lose) {
				t.Errorf("lose = %v, want %v", lose, tc.want.lose)
			}
			if !reflect.DeepEqual(drop, tc.want.dropReplica) {
				t.Errorf("dropReplica = %v, want %v", drop, tc.want.dropReplica)
			}
		})
	}
}
