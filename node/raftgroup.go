package node

import (
	"errors"
	"sort"

	"github.com/weirlimit/weir/node/clusterview"
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
	gone := n.gossiped.LeftMembers()
	if err := n.store.Reconcile(n.ctx, alive, gone); err != nil && n.ctx.Err() == nil {
		n.log.Warn("raft reconcile", "err", err)
	}
}

// noLeaderReason says why no Raft leader will come, when the node knows:
// it was started with neither --bootstrap-expect nor --join and is in no
// Raft configuration (never bootstrapped, never added). Such a node does
// not bootstrap itself (two of them would be two clusters): it waits for
// a member of a cluster to join it. Empty otherwise, and once a leader is
// known.
func (n *Node) noLeaderReason() string {
	if n.cfg.BootstrapExpect > 0 || len(n.cfg.Join) > 0 {
		return ""
	}
	if id, _ := n.store.Leader(); id != "" {
		return ""
	}
	if cfg, err := n.store.Configuration(); err != nil || len(cfg) > 0 {
		return ""
	}
	return "no Raft leader: this node was started with neither --bootstrap-expect nor --join, " +
		"so it forms no cluster on its own; start a new cluster's nodes with --bootstrap-expect N " +
		"(1 for a single node) or join this one to a cluster with --join HOST:PORT"
}

func isAlreadyBootstrapped(err error) bool { return errors.Is(err, rulesraft.ErrAlreadyBootstrapped) }

// watchQuorum samples every clusterview.QuorumSample whether this node
// knows a Raft leader and feeds it to a clusterview.Quorum, which keeps how
// long it has known none (published as Node.leaderlessFor for the
// ring-view policy) and tells when this node comes back from being cut
// off: it then marks the quorum regained (Node.regained) and wakes the
// cluster loop. The probes of the peers it asks for (after
// clusterview.QuorumLostAfter without a leader) run here, one at a time.
func (n *Node) watchQuorum() {
	var q clusterview.Quorum
	n.every(clusterview.QuorumSample, func() bool {
		id, _ := n.store.Leader()
		probe, regained := q.Tick(id != "")
		n.leaderlessFor.Store(int64(q.LeaderlessFor()))
		if probe {
			regained = q.Answered(n.peerAnswers(n.ctx))
		}
		if regained {
			n.regained.Store(true)
			n.signalChanged()
		}
		return false
	})
}
