package rulesraft

import "strconv"

// Term is this member's current Raft term (0 when unknown).
func (s *Store) Term() uint64 {
	t, _ := strconv.ParseUint(s.raft.Stats()["term"], 10, 64)
	return t
}
