package node

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/rulesraft/rules"
)

func (n *Node) memberCount() int {
	v := n.view.Load()
	if v == nil {
		return 1
	}
	return len(v.members)
}

// readMembers returns the live members (alive or suspect) by id, from the
// copies the event delegate keeps (memberlist's own Node structs may change
// under a reader).
func (n *Node) readMembers() map[string]member { return n.gossiped.Live() }

// departedMember reports whether gossip saw id die or leave (a node this
// node has not heard of yet is not departed).
func (n *Node) departedMember(id string) bool { return n.gossiped.IsDeparted(id) }

// remember copies a member's address, state and metadata into n.gossiped.
// Called from memberlist callbacks, which hold memberlist's lock while m
// is stable. memberlist does not fill in m.State (its own record of the
// state is elsewhere), so the state is derived: a member that gossip drops
// while its metadata says it is leaving left gracefully; any other was
// declared dead.
func (n *Node) remember(m *memberlist.Node, gone bool) {
	var meta memberMeta
	if len(m.Meta) > 0 {
		_ = json.Unmarshal(m.Meta, &meta)
	}
	if !n.sec.ProvenMember(m.Name, member{Boot: meta.Boot, Proof: meta.Proof}) {
		n.gossiped.Drop(m.Name)
		return
	}
	st := memberlist.StateAlive
	if gone {
		st = memberlist.StateDead
		if meta.Leaving {
			st = memberlist.StateLeft
		}
	}
	n.gossiped.Report(member{
		ID: m.Name, Gossip: m.Address(), State: stateName(st),
		GRPC: meta.GRPC, HTTP: meta.HTTP, Raft: meta.Raft, Leaving: meta.Leaving,
		Gateways: meta.Gateways, Boot: meta.Boot, Proof: meta.Proof, Features: meta.Features,
	}, time.Now())
}

// reconnectLoop tries, every clusterview.RejoinEvery, to rejoin the
// members gossip declared dead in the last 15 minutes (Book.LostDue). A
// dead member may only have been cut off (a network split): after a split
// each side holds the other as dead, and memberlist alone does not merge
// them again once the dead notices stopped being gossiped. A join is a
// full state exchange: each side learns it was declared dead, refutes it,
// and the member sets merge (two rounds at most). A member that really
// died refuses the connection.
//
// It also re-announces this node while gossip records it at another
// address (clusterview.Reannounce).
func (n *Node) reconnectLoop() {
	n.every(clusterview.RejoinEvery, func() bool {
		if n.leaving.Load() {
			return false
		}
		var conflictAt time.Time
		if at := n.selfConflict.Load(); at != 0 {
			conflictAt = time.Unix(0, at)
		}
		if clusterview.Reannounce(time.Now(), conflictAt) {
			if addrs := n.gossiped.PeerGossipAddrs(); len(addrs) > 0 {
				k, err := n.ml.Join(addrs)
				n.log.Info("gossip has this node at another address; re-announced", "contacted", k, "err", err)
			}
		}
		if addrs := n.gossiped.LostDue(time.Now()); len(addrs) > 0 {
			if k, err := n.ml.Join(addrs); err != nil && k == 0 {
				n.log.Debug("reconnect to dead members failed", "members", len(addrs), "err", err)
			} else {
				n.log.Info("reconnected to members declared dead", "contacted", k)
			}
		}
		return false
	})
}

// raftAddrOf is the Raft address gossip last gave for member id (Raft
// dials it instead of the configured one: see rulesraft.Config.PeerAddr).
// A member that died keeps its last address, so Raft keeps dialling where
// it was.
func (n *Node) raftAddrOf(id string) (string, bool) { return n.gossiped.RaftAddr(id) }

// departedMembers returns the members gossip saw die or leave recently,
// with how they went.
func (n *Node) departedMembers() map[string]memberlist.NodeStateType {
	out := map[string]memberlist.NodeStateType{}
	for id, st := range n.gossiped.Departed() {
		out[id] = memberlist.StateDead
		if st == clusterview.Left {
			out[id] = memberlist.StateLeft
		}
	}
	return out
}

// advertisedFeatures is what this node gossips as its supported rule
// features: all of this binary's (rules.Features) but those left out.
func advertisedFeatures(without []string) string {
	var out []string
	for _, f := range rules.Features() {
		if !slices.Contains(without, f) {
			out = append(out, f)
		}
	}
	return strings.Join(out, ",")
}

// memberFeatures are the rule features each live member advertises, by id
// (rulesraft.Config.MemberFeatures: the leader refuses rules some member
// cannot read).
func (n *Node) memberFeatures() map[string][]string {
	out := map[string][]string{}
	for id, m := range n.readMembers() {
		out[id] = nil
		if m.Features != "" {
			out[id] = strings.Split(m.Features, ",")
		}
	}
	return out
}
