package membership

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/rulesraft"
)

// manageRaft bootstraps the group (see bootstrap) and, on the leader,
// reconciles the Raft configuration with the published view.
func (c *Cluster) manageRaft(ctx context.Context, members map[string]clusterview.Member) {
	c.bootstrap(members)
	v := c.view.Load()
	if v == nil || !c.deps.Raft.IsLeader() {
		return
	}
	var alive []rulesraft.Server
	for _, m := range v.Members {
		if m.Raft != "" && m.State == "alive" {
			alive = append(alive, rulesraft.Server{ID: m.ID, Addr: m.Raft})
		}
	}
	sort.Slice(alive, func(i, j int) bool { return alive[i].ID < alive[j].ID })
	gone := c.gossiped.LeftMembers()
	if err := c.deps.Raft.Reconcile(ctx, alive, gone); err != nil && ctx.Err() == nil {
		c.log.Warn("raft reconcile", "err", err)
	}
}

// bootstrap bootstraps the group as clusterview.Bootstrap decides, from
// the admitted live members (which the first ring may still wait for; nil
// during a join).
func (c *Cluster) bootstrap(members map[string]clusterview.Member) {
	if c.cfg.BootstrapExpect == 0 || c.boot.Load() || members == nil {
		return
	}
	ids, formed := clusterview.Bootstrap(c.cfg.ID, c.cfg.BootstrapExpect, members)
	if formed {
		c.log.Info("raft group already formed: not bootstrapping; its leader adds this node")
		c.boot.Store(true)
		return
	}
	if ids == nil {
		return
	}
	servers := make([]rulesraft.Server, len(ids))
	for i, id := range ids {
		servers[i] = rulesraft.Server{ID: id, Addr: members[id].Raft}
	}
	if err := c.deps.Raft.Bootstrap(servers); err != nil && !isAlreadyBootstrapped(err) {
		c.log.Warn("raft bootstrap", "err", err)
		return
	}
	c.boot.Store(true)
}

// NoLeaderReason says why no Raft leader will come, when the node knows:
// it was started with neither --bootstrap-expect nor --join and is in no
// Raft configuration (never bootstrapped, never added). Such a node does
// not bootstrap itself (two of them would be two clusters): it waits for
// a member of a cluster to join it. Empty otherwise, and once a leader is
// known.
func (c *Cluster) NoLeaderReason() string {
	if c.cfg.BootstrapExpect > 0 || len(c.cfg.Join) > 0 {
		return ""
	}
	if id, _ := c.deps.Raft.Leader(); id != "" {
		return ""
	}
	if cfg, err := c.deps.Raft.Configuration(); err != nil || len(cfg) > 0 {
		return ""
	}
	return "no Raft leader: this node was started with neither --bootstrap-expect nor --join, " +
		"so it forms no cluster on its own; start a new cluster's nodes with --bootstrap-expect N " +
		"(1 for a single node) or join this one to a cluster with --join HOST:PORT"
}

// grouped reports whether this node has just found itself in the Raft
// group's configuration (it bootstrapped it, or the leader added it):
// then, once, it is to gossip that (Meta.InGroup).
func (c *Cluster) grouped() bool {
	if c.inGroup.Load() {
		return false
	}
	if cfg, err := c.deps.Raft.Configuration(); err != nil || !slices.ContainsFunc(cfg, func(s rulesraft.ServerInfo) bool { return s.ID == c.cfg.ID }) {
		return false
	}
	c.inGroup.Store(true)
	return true
}

func isAlreadyBootstrapped(err error) bool { return errors.Is(err, rulesraft.ErrAlreadyBootstrapped) }

// watchQuorum samples every clusterview.QuorumSample whether this node
// knows a Raft leader and feeds it to a clusterview.Quorum, which keeps how
// long it has known none (published as Cluster.leaderlessFor for the
// ring-view policy) and tells when this node comes back from being cut
// off: it then marks the quorum regained (Cluster.regained) and wakes the
// cluster loop. The probes of the peers it asks for (after
// clusterview.QuorumLostAfter without a leader) run here, one at a time.
// While a leader is known a sample only resets the Quorum, so the watch
// sleeps until Raft reports a change of leader and samples from one
// QuorumSample after it (the same samples as a ticker that never
// stopped): an idle node is not woken ten times a second for nothing.
func (c *Cluster) watchQuorum(ctx context.Context) {
	var q clusterview.Quorum
	tick := time.NewTicker(clusterview.QuorumSample)
	defer tick.Stop()
	changed := c.deps.Raft.LeaderChanged()
	for {
		if c.sampleQuorum(ctx, &q) {
			tick.Stop()
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			tick.Reset(clusterview.QuorumSample)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sampleQuorum takes one sample for watchQuorum; it reports whether this
// node knows a leader.
func (c *Cluster) sampleQuorum(ctx context.Context, q *clusterview.Quorum) (leader bool) {
	id, _ := c.deps.Raft.Leader()
	probe, regained := q.Tick(id != "")
	c.leaderlessFor.Store(int64(q.LeaderlessFor()))
	if probe {
		regained = q.Answered(c.peerAnswers(ctx))
	}
	if regained {
		c.regained.Store(true)
		c.Refresh()
	}
	return id != ""
}
