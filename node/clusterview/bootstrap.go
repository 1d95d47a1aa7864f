package clusterview

import (
	"maps"
	"slices"
)

// Bootstrap decides, for node self started with --bootstrap-expect expect,
// from the admitted live members (once they settled: Settle): the members to bootstrap the Raft group
// with now (the first expect by id that have a Raft address; nil: not
// enough yet), or formed when another member gossips that it is in the
// group's configuration already. A node started late with
// --bootstrap-expect then waits for the leader to add it: bootstrapping
// from the members it sees would make a second configuration, and one
// naming this node but not the leader refuses the leader's appends.
func Bootstrap(self string, expect int, members map[string]Member) (ids []string, formed bool) {
	for _, id := range slices.Sorted(maps.Keys(members)) {
		m := members[id]
		if id != self && m.InGroup {
			return nil, true
		}
		if m.Raft != "" {
			ids = append(ids, id)
		}
	}
	if expect <= 0 || len(ids) < expect {
		return nil, false
	}
	return ids[:expect], false
}
