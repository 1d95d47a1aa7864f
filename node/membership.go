package node

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/hashicorp/memberlist"
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
func (n *Node) readMembers() map[string]member {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	out := make(map[string]member, len(n.known))
	for id, m := range n.known {
		out[id] = m
	}
	return out
}

// departedMember reports whether gossip saw id die or leave (a node this
// node has not heard of yet is not departed).
func (n *Node) departedMember(id string) bool {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	_, ok := n.departed[id]
	return ok
}

// remember copies a member's address, state and metadata. Called from
// memberlist callbacks, which hold memberlist's lock while m is stable.
// memberlist does not fill in m.State (its own record of the state is
// elsewhere), so the state is derived: a member that gossip drops while
// its metadata says it is leaving left gracefully; any other was declared
// dead.
func (n *Node) remember(m *memberlist.Node, gone bool) {
	mm := member{ID: m.Name, Gossip: m.Address(), State: stateName(memberlist.StateAlive)}
	if len(m.Meta) > 0 {
		_ = json.Unmarshal(m.Meta, &mm.memberMeta)
	}
	if !n.provenMember(m.Name, mm.memberMeta) {
		n.membersMu.Lock()
		delete(n.known, m.Name)
		n.membersMu.Unlock()
		return
	}
	st := memberlist.StateAlive
	if gone {
		st = memberlist.StateDead
		if mm.Leaving {
			st = memberlist.StateLeft
		}
	}
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	if mm.Raft != "" {
		n.raftSeen[m.Name] = mm.Raft
	}
	if gone {
		delete(n.known, m.Name)
		n.departed[m.Name] = departure{st, time.Now()}
		n.forgetDepartedLocked()
		if st == memberlist.StateDead && m.Name != n.cfg.ID {
			n.lost[m.Name] = lostMember{gossip: mm.Gossip, boot: mm.Boot, since: time.Now()}
		}
	} else {
		n.known[m.Name] = mm
		delete(n.departed, m.Name)
		if l, ok := n.lost[m.Name]; ok && l.boot != 0 && l.boot == mm.Boot {
			n.rejoined[m.Name] = true // lived through a split: see splitBase
		}
		delete(n.lost, m.Name)
	}
}

// takeRejoined returns the members that came back since the last call
// after gossip had declared them dead, without having restarted.
func (n *Node) takeRejoined() map[string]bool {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	out := n.rejoined
	n.rejoined = map[string]bool{}
	return out
}

// lostMember is a member gossip declared dead (not one that left).
type lostMember struct {
	gossip string
	boot   uint64
	since  time.Time
	next   time.Time // the next attempt to rejoin it
}

// Reconnecting to members declared dead: every reconnectEvery for
// reconnectFastFor after their death (a network split heals quickly),
// then every reconnectSlowEvery, and not after reconnectFor (an address
// that stays dead may be reused by anything; the cluster label keeps
// another cluster's nodes out anyway).
const (
	reconnectEvery     = 2 * time.Second
	reconnectFastFor   = 2 * time.Minute
	reconnectSlowEvery = 30 * time.Second
	reconnectFor       = 15 * time.Minute
)

// reconnectLoop tries, every reconnectEvery, to rejoin the members gossip
// declared dead in the last reconnectFor. A dead member may only have been
// cut off (a network split): after a split each side holds the other as
// dead, and memberlist alone does not merge them again once the dead
// notices stopped being gossiped. A join is a full state exchange: each
// side learns it was declared dead, refutes it, and the member sets merge
// (two rounds at most). A member that really died refuses the connection.
//
// It also re-announces this node while gossip records it at another
// address (it came back elsewhere, e.g. a rescheduled pod, before the old
// address was declared dead): a push/pull with every member hands them
// this node's record, which they take once the old one is dead.
func (n *Node) reconnectLoop() {
	n.every(reconnectEvery, func() bool {
		if n.leaving.Load() {
			return false
		}
		if at := n.selfConflict.Load(); at != 0 && time.Since(time.Unix(0, at)) < conflictRejoinFor {
			if addrs := n.peerGossipAddrs(); len(addrs) > 0 {
				k, err := n.ml.Join(addrs)
				n.log.Info("gossip has this node at another address; re-announced", "contacted", k, "err", err)
			}
		}
		if addrs := n.lostAddrs(time.Now()); len(addrs) > 0 {
			if k, err := n.ml.Join(addrs); err != nil && k == 0 {
				n.log.Debug("reconnect to dead members failed", "members", len(addrs), "err", err)
			} else {
				n.log.Info("reconnected to members declared dead", "contacted", k)
			}
		}
		return false
	})
}

// conflictRejoinFor is how long after the last record of this node at
// another address it keeps re-announcing itself.
const conflictRejoinFor = 30 * time.Second

// peerGossipAddrs lists the gossip addresses of the live members but this
// node.
func (n *Node) peerGossipAddrs() []string {
	var out []string
	for id, m := range n.readMembers() {
		if id != n.cfg.ID && m.Gossip != "" {
			out = append(out, m.Gossip)
		}
	}
	sort.Strings(out)
	return out
}

// lostAddrs lists the gossip addresses of members declared dead less than
// reconnectFor ago that are due for an attempt, and forgets older ones.
func (n *Node) lostAddrs(now time.Time) []string {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	var out []string
	for id, l := range n.lost {
		age := now.Sub(l.since)
		if age > reconnectFor {
			delete(n.lost, id)
			continue
		}
		if l.gossip == "" || now.Before(l.next) {
			continue
		}
		l.next = now.Add(reconnectEvery)
		if age > reconnectFastFor {
			l.next = now.Add(reconnectSlowEvery)
		}
		n.lost[id] = l
		out = append(out, l.gossip)
	}
	sort.Strings(out)
	return out
}

// leftMembers lists members that left gracefully (so the leader removes
// them from Raft at once instead of waiting for the voter grace period).
func (n *Node) leftMembers() []string {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	var out []string
	for id, d := range n.departed {
		if d.state == memberlist.StateLeft {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// departure is how and when a member left gossip.
type departure struct {
	state memberlist.NodeStateType // dead or left
	at    time.Time
}

// departedFor is how long a departed member is remembered (listed by
// Members, its moved marks cleared, retried if it died). A member gone
// longer is forgotten, so ids that come and go do not pile up.
const departedFor = time.Hour

func (n *Node) forgetDepartedLocked() {
	for id, d := range n.departed {
		if time.Since(d.at) > departedFor {
			delete(n.departed, id)
		}
	}
	for id := range n.raftSeen {
		_, live := n.known[id]
		_, gone := n.departed[id]
		if !live && !gone {
			delete(n.raftSeen, id)
		}
	}
}

// raftAddrOf is the Raft address gossip last gave for member id (Raft
// dials it instead of the configured one: see rulesraft.Config.PeerAddr).
// A member that died keeps its last address, so Raft keeps dialling where
// it was.
func (n *Node) raftAddrOf(id string) (string, bool) {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	a, ok := n.raftSeen[id]
	return a, ok
}

// othersInRing reports whether a live member other than this node is in
// the ring (not leaving): one that can take partitions.
func (n *Node) othersInRing() bool {
	for id, m := range n.readMembers() {
		if id != n.cfg.ID && !m.Leaving {
			return true
		}
	}
	return false
}

// departedMembers returns the members gossip saw die or leave recently,
// with how they went.
func (n *Node) departedMembers() map[string]memberlist.NodeStateType {
	n.membersMu.Lock()
	defer n.membersMu.Unlock()
	out := make(map[string]memberlist.NodeStateType, len(n.departed))
	for id, d := range n.departed {
		out[id] = d.state
	}
	return out
}
