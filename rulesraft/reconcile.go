package rulesraft

import (
	"context"
	"fmt"
	"slices"
	"time"

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
	conf, err := s.Configuration()
	if err != nil {
		return err
	}
	r := newReconcile(ctx, s, conf, alive, left)
	leaveSelf, err := r.removeLeaving()
	if err != nil {
		return err
	}
	if err := r.addAlive(); err != nil {
		return err
	}
	if err := r.promote(r.trackMissing(now)); err != nil {
		return err
	}
	if leaveSelf {
		return r.change("remove "+r.self, s.raft.RemoveServer(raft.ServerID(r.self), 0, timeout(ctx)))
	}
	return nil
}

// reconcile is one Reconcile call's view: the configuration as it changes,
// the alive and leaving members, and the voter count it aims for.
type reconcile struct {
	ctx     context.Context
	s       *Store
	self    string
	members map[string]ServerInfo // the configuration, kept up to date
	alive   map[string]Server     // this member always among them
	leaving map[string]bool
	voters  int // voters in members
	want    int // maxVoters(len(alive))
}

func newReconcile(ctx context.Context, s *Store, conf []ServerInfo, alive []Server, left []string) *reconcile {
	r := &reconcile{ctx: ctx, s: s, self: s.cfg.ID,
		members: make(map[string]ServerInfo, len(conf)), alive: make(map[string]Server, len(alive)+1), leaving: make(map[string]bool, len(left))}
	for _, m := range conf {
		r.members[m.ID] = m
		if m.Voter {
			r.voters++
		}
	}
	for _, a := range alive {
		r.alive[a.ID] = a
	}
	if _, ok := r.alive[r.self]; !ok {
		r.alive[r.self] = Server{ID: r.self, Addr: s.Addr()}
	}
	for _, id := range left {
		r.leaving[id] = true
	}
	r.want = maxVoters(len(r.alive))
	return r
}

// change waits for one configuration change and logs it.
func (r *reconcile) change(what string, f raft.IndexFuture) error {
	if err := r.s.wait(r.ctx, f); err != nil {
		return fmt.Errorf("rules store: reconcile: %s: %w", what, err)
	}
	r.s.log.Info("raft membership changed", "change", what)
	return nil
}

func (r *reconcile) addVoter(sv Server) error {
	if err := r.change("voter "+sv.ID, r.s.raft.AddVoter(raft.ServerID(sv.ID), raft.ServerAddress(sv.Addr), 0, timeout(r.ctx))); err != nil {
		return err
	}
	r.members[sv.ID] = ServerInfo{ID: sv.ID, Addr: sv.Addr, Voter: true}
	r.voters++
	return nil
}

// removeLeaving removes the gracefully leaving members but this one, and
// says whether this one leaves too (it is removed last).
func (r *reconcile) removeLeaving() (leaveSelf bool, err error) {
	for _, id := range sortedKeys(r.leaving) {
		m, ok := r.members[id]
		if !ok {
			continue
		}
		if id == r.self {
			leaveSelf = true
			continue
		}
		if err := r.change("remove "+id, r.s.raft.RemoveServer(raft.ServerID(id), 0, timeout(r.ctx))); err != nil {
			return false, err
		}
		delete(r.members, id)
		if m.Voter {
			r.voters--
		}
		delete(r.s.missingSince, id)
	}
	return leaveSelf, nil
}

// addAlive adds alive members not in the configuration, or at a new
// address. With PeerAddr, a member at a new address is left as it is: Raft
// already dials it where PeerAddr says, and changing the address of a
// member Raft replicates to races in hashicorp/raft v1.8 (the leader
// rewrites the follower's record while its replication goroutine reads it:
// hashicorp/raft#471, #681).
func (r *reconcile) addAlive() error {
	for _, id := range sortedKeys(r.alive) {
		sv := r.alive[id]
		if r.leaving[id] {
			continue
		}
		m, ok := r.members[id]
		switch {
		case ok && (m.Addr == sv.Addr || r.s.cfg.PeerAddr != nil):
		case (ok && m.Voter) || (!ok && r.voters < r.want):
			if ok {
				r.voters-- // re-added at its new address
			}
			if err := r.addVoter(sv); err != nil {
				return err
			}
		default:
			if err := r.change("non-voter "+id, r.s.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(sv.Addr), 0, timeout(r.ctx))); err != nil {
				return err
			}
			r.members[id] = ServerInfo{ID: id, Addr: sv.Addr}
		}
	}
	return nil
}

// trackMissing notes when each voter went missing from alive and returns
// those missing for Config.VoterGrace or longer at now.
func (r *reconcile) trackMissing(now time.Time) (overdue []string) {
	missing := r.s.missingSince
	for _, id := range sortedKeys(r.members) {
		if _, ok := r.alive[id]; ok || !r.members[id].Voter {
			delete(missing, id)
			continue
		}
		first, seen := missing[id]
		if !seen {
			missing[id] = now
			continue
		}
		if now.Sub(first) >= r.s.cfg.VoterGrace {
			overdue = append(overdue, id)
		}
	}
	for id := range missing {
		if m, ok := r.members[id]; !ok || !m.Voter {
			delete(missing, id)
		}
	}
	return overdue
}

// promote promotes alive non-voters while voters are short, then in place
// of the overdue voters (demoting those).
func (r *reconcile) promote(overdue []string) error {
	var spare []Server
	for _, id := range sortedKeys(r.members) {
		if sv, ok := r.alive[id]; ok && !r.members[id].Voter && !r.leaving[id] {
			spare = append(spare, sv)
		}
	}
	for len(spare) > 0 && r.voters < r.want {
		if err := r.addVoter(spare[0]); err != nil {
			return err
		}
		spare = spare[1:]
	}
	for _, id := range overdue {
		if len(spare) == 0 {
			break
		}
		if err := r.addVoter(spare[0]); err != nil {
			return err
		}
		spare = spare[1:]
		if err := r.change("demote "+id, r.s.raft.DemoteVoter(raft.ServerID(id), 0, timeout(r.ctx))); err != nil {
			return err
		}
		m := r.members[id]
		m.Voter = false
		r.members[id] = m
		r.voters--
		delete(r.s.missingSince, id)
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
