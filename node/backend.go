package node

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/api"
)

// backend is what node/api's edges need from the node, in domain types.
type backend struct{ n *Node }

var _ api.Backend = backend{}

func (b backend) Check(ctx context.Context, items []limit.Item, out []limit.Result) error {
	return b.n.Check(ctx, items, out)
}

func (b backend) GetLimits(ctx context.Context, key string) ([]api.KeyLimit, error) {
	return b.n.GetLimits(ctx, key)
}

func (b backend) Members(context.Context) (api.Members, error) {
	return b.n.Members(), nil
}

func (b backend) Rules() api.RuleStore { return b.n.store }

func (b backend) LeaderGRPC() (string, bool) {
	id, _ := b.n.store.Leader()
	if id == "" {
		return "", false
	}
	v := b.n.cluster.View()
	if v == nil {
		return "", false
	}
	return v.Addr(id)
}

func (b backend) Ready() error { return b.n.Ready() }

func (b backend) Gateways() uint32 { return b.n.Gateways() }

// Gateways is the number of gateways watching rules on any member.
func (n *Node) Gateways() uint32 {
	v := n.cluster.View()
	if v == nil {
		return n.api.Gateways()
	}
	var sum uint32
	for id, m := range v.Members {
		if id == n.cfg.ID {
			sum += n.api.Gateways()
		} else {
			sum += m.Gateways
		}
	}
	return sum
}

// Ready reports why the node cannot serve yet (nil when it can): it needs a
// ring, a Raft leader and the rule set.
func (n *Node) Ready() error {
	if n.cluster.Leaving() {
		return errors.New("node is leaving the cluster")
	}
	if n.cluster.View() == nil {
		return errors.New("no cluster view yet")
	}
	if id, _ := n.store.Leader(); id == "" {
		if why := n.cluster.NoLeaderReason(); why != "" {
			return errors.New(why)
		}
		return errors.New("no raft leader yet")
	}
	if n.store.Current() == nil {
		return errors.New("rules not loaded yet")
	}
	if n.handoff.Routes().Pending() > 0 {
		return errors.New("waiting for partition hand-off")
	}
	return nil
}

// Members describes the cluster as this node sees it.
func (n *Node) Members() api.Members {
	v := n.cluster.View()
	out := api.Members{
		PartitionCount:    uint32(n.cfg.Ring.PartitionCount),
		ReplicationFactor: uint32(n.cfg.Ring.ReplicationFactor),
		Load:              n.cfg.Ring.Load,
		RingLayout:        n.cfg.Ring.Layout.String(),
		Gateways:          n.Gateways(),
		NoLeader:          n.cluster.NoLeaderReason(),
	}
	if v == nil {
		return out
	}
	out.RingVersion = v.Version
	leader, _ := n.store.Leader()
	roles := map[string]string{}
	if cfg, err := n.store.Configuration(); err == nil {
		for _, s := range cfg {
			if s.Voter {
				roles[s.ID] = "follower"
			} else {
				roles[s.ID] = "nonvoter"
			}
		}
	}
	if leader != "" {
		roles[leader] = "leader"
	}
	for id, m := range v.Members {
		role := roles[id]
		if role == "" {
			role = "none"
		}
		if m.Leaving {
			m.State = "leaving"
		}
		out.Members = append(out.Members, api.Member{
			ID:              id,
			GRPCAddr:        m.GRPC,
			HTTPAddr:        m.HTTP,
			RaftAddr:        m.Raft,
			GossipAddr:      m.Gossip,
			State:           m.State,
			PartitionsOwned: uint32(len(v.Ring.OwnedBy(id))),
			ReplicasHeld:    uint32(len(v.Ring.HeldBy(id))),
			RaftRole:        role,
		})
	}
	// Members gossip saw die or leave, so an operator sees them go.
	for id, st := range n.cluster.DepartedMembers() {
		if _, ok := v.Members[id]; !ok {
			out.Members = append(out.Members, api.Member{ID: id, State: st, RaftRole: "none"})
		}
	}
	slices.SortFunc(out.Members, func(a, b api.Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}
