package rulesraft

import (
	"context"
	"fmt"
	"slices"

	"github.com/hashicorp/raft"
)

// maxVoters is how many voters the group wants for the number of alive
// members: 3, or 5 once five or more are alive.
func maxVoters(alive int) int {
	if alive >= 5 {
		return 5
	}
	return 3
}

// Reconcile moves the Raft configuration towards the membership the node
// sees through gossip. On the leader it
//   - removes the members in left (graceful leaves; itself last),
//   - adds alive members missing from the configuration, as voters while
//     there are fewer than maxVoters and as non-voters after that (and,
//     without Config.PeerAddr, moves members to the address alive gives),
//   - promotes alive non-voters while voters are short, and
//   - when a voter has been missing from alive for longer than
//     Config.VoterGrace, promotes an alive non-voter and demotes the missing
//     voter, keeping the voter count.
//
// On a follower it does nothing and returns nil. Calls are serialized.
func (s *Store) Reconcile(ctx context.Context, alive []Server, left []string) error {
	if s.isClosed() {
		return ErrClosed
	}
	s.recMu.Lock()
	defer s.recMu.Unlock()
	if !s.IsLeader() {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	now := s.clock()
	self := s.cfg.ID

	change := func(what string, f raft.IndexFuture) error {
		if err := s.wait(ctx, f); err != nil {
			return fmt.Errorf("rules store: reconcile: %s: %w", what, err)
		}
		s.log.Info("raft membership changed", "change", what)
		return nil
	}
	conf, err := s.Configuration()
	if err != nil {
		return err
	}
	members := make(map[string]ServerInfo, len(conf))
	for _, m := range conf {
		members[m.ID] = m
	}
	aliveByID := make(map[string]Server, len(alive))
	for _, a := range alive {
		aliveByID[a.ID] = a
	}
	if _, ok := aliveByID[self]; !ok {
		aliveByID[self] = Server{ID: self, Addr: s.Addr()}
	}
	leaving := make(map[string]bool, len(left))
	for _, id := range left {
		leaving[id] = true
	}

	// 1. Graceful leaves, this member last.
	var leaveSelf bool
	for _, id := range sortedKeys(leaving) {
		if _, ok := members[id]; !ok {
			continue
		}
		if id == self {
			leaveSelf = true
			continue
		}
		if err := change("remove "+id, s.raft.RemoveServer(raft.ServerID(id), 0, timeout(ctx))); err != nil {
			return err
		}
		delete(members, id)
		delete(s.missingSince, id)
	}

	voters := 0
	for _, m := range members {
		if m.Voter {
			voters++
		}
	}
	want := maxVoters(len(aliveByID))
	addVoter := func(sv Server) error {
		if err := change("voter "+sv.ID, s.raft.AddVoter(raft.ServerID(sv.ID), raft.ServerAddress(sv.Addr), 0, timeout(ctx))); err != nil {
			return err
		}
		members[sv.ID] = ServerInfo{ID: sv.ID, Addr: sv.Addr, Voter: true}
		voters++
		return nil
	}

	// 2. Alive members not in the configuration, or at a new address. With
	// PeerAddr, a member at a new address is left as it is: Raft already
	// dials it where PeerAddr says, and changing the address of a member
	// Raft replicates to races in hashicorp/raft v1.8 (the leader rewrites
	// the follower's record while its replication goroutine reads it:
	// hashicorp/raft#471, #681).
	for _, id := range sortedKeys(aliveByID) {
		sv := aliveByID[id]
		if leaving[id] {
			continue
		}
		m, ok := members[id]
		switch {
		case ok && (m.Addr == sv.Addr || s.cfg.PeerAddr != nil):
		case (ok && m.Voter) || (!ok && voters < want):
			if ok {
				voters-- // re-added at its new address
			}
			if err := addVoter(sv); err != nil {
				return err
			}
		default:
			if err := change("non-voter "+id, s.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(sv.Addr), 0, timeout(ctx))); err != nil {
				return err
			}
			members[id] = ServerInfo{ID: id, Addr: sv.Addr}
		}
	}

	// 3. Track voters missing from alive.
	var overdue []string
	for _, id := range sortedKeys(members) {
		m := members[id]
		if _, ok := aliveByID[id]; ok || !m.Voter {
			delete(s.missingSince, id)
			continue
		}
		first, seen := s.missingSince[id]
		if !seen {
			s.missingSince[id] = now
			continue
		}
		if now.Sub(first) >= s.cfg.VoterGrace {
			overdue = append(overdue, id)
		}
	}
	for id := range s.missingSince {
		if m, ok := members[id]; !ok || !m.Voter {
			delete(s.missingSince, id)
		}
	}

	// 4. Promote alive non-voters while voters are short, then in place of
	// overdue voters (demoting those).
	var spare []Server
	for _, id := range sortedKeys(members) {
		if sv, ok := aliveByID[id]; ok && !members[id].Voter && !leaving[id] {
			spare = append(spare, sv)
		}
	}
	for len(spare) > 0 && voters < want {
		if err := addVoter(spare[0]); err != nil {
			return err
		}
		spare = spare[1:]
	}
	for _, id := range overdue {
		if len(spare) == 0 {
			break
		}
		if err := addVoter(spare[0]); err != nil {
			return err
		}
		spare = spare[1:]
		if err := change("demote "+id, s.raft.DemoteVoter(raft.ServerID(id), 0, timeout(ctx))); err != nil {
			return err
		}
		m := members[id]
		m.Voter = false
		members[id] = m
		voters--
		delete(s.missingSince, id)
	}

	if leaveSelf {
		return change("remove "+self, s.raft.RemoveServer(raft.ServerID(self), 0, timeout(ctx)))
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
