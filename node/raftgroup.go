package node

import (
	"errors"
	"sort"
	"time"

	"github.com/weirlimit/weir/rulesraft"
)

// manageRaft bootstraps the group once enough members are present and, on
// the leader, reconciles the Raft configuration with gossip membership.
func (n *Node) manageRaft() {
	v := n.view.Load()
	if v == nil {
		return
	}
	if n.cfg.BootstrapExpect > 0 && !n.boot.Load() {
		var servers []rulesraft.Server
		for _, m := range v.members {
			if m.Raft != "" {
				servers = append(servers, rulesraft.Server{ID: m.ID, Addr: m.Raft})
			}
		}
		if len(servers) >= n.cfg.BootstrapExpect {
			sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
			servers = servers[:n.cfg.BootstrapExpect]
			err := n.store.Bootstrap(servers)
			if err != nil && !isAlreadyBootstrapped(err) {
				n.log.Warn("raft bootstrap", "err", err)
			} else {
				n.boot.Store(true)
			}
		}
	}
	if !n.store.IsLeader() {
		return
	}
	var alive []rulesraft.Server
	for _, m := range v.members {
		if m.Raft != "" && m.State == "alive" {
			alive = append(alive, rulesraft.Server{ID: m.ID, Addr: m.Raft})
		}
	}
	sort.Slice(alive, func(i, j int) bool { return alive[i].ID < alive[j].ID })
	gone := n.leftMembers()
	if err := n.store.Reconcile(n.ctx, alive, gone); err != nil && n.ctx.Err() == nil {
		n.log.Warn("raft reconcile", "err", err)
	}
}

func isAlreadyBootstrapped(err error) bool { return errors.Is(err, rulesraft.ErrAlreadyBootstrapped) }

// watchQuorum samples every 100 ms how long this node has known no Raft
// leader (Node.leaderlessFor), and marks the quorum regained
// (Node.regained) when this node comes back from being cut off: after
// quorumLostAfter without a leader, it asks its peers every
// leaveProbeEvery whether they answer, and once none did, the first answer
// (the network is back) or a leader known again counts. Raft alone would
// say so late: the leader backs off from a follower it could not reach, up
// to tens of seconds. After a network split, the side that spent it
// without a leader had no quorum, and the other side may have served its
// partitions meanwhile (see changeRing). A long election among reachable
// peers is not a cut: they answer throughout.
func (n *Node) watchQuorum() {
	const every = 100 * time.Millisecond
	var (
		seen bool          // a leader was known once (startup is not a loss)
		run  time.Duration // the current stretch without a leader
		cut  bool          // in this stretch, no peer answered
		done bool          // regained already marked in this stretch
	)
	regain := func() {
		if !done {
			n.regained.Store(true)
			n.signalChanged()
			done = true
		}
	}
	n.every(every, func() bool {
		if id, _ := n.store.Leader(); id != "" {
			if run >= quorumLostAfter {
				regain()
			}
			seen, run, cut, done = true, 0, false, false
			n.leaderlessFor.Store(0)
			return false
		}
		if !seen {
			return false
		}
		run += every
		n.leaderlessFor.Store(int64(run))
		if run >= quorumLostAfter && !done && run%leaveProbeEvery == 0 {
			switch answers := n.peerAnswers(n.ctx); {
			case !answers:
				cut = true
			case cut:
				regain()
			}
		}
		return false
	})
}

// quorumLostAfter is how long without a Raft leader counts as cut off from
// the quorum: about the time gossip takes to declare a silent member dead,
// after which the others take over its partitions.
const quorumLostAfter = 2 * time.Second
