package node

import (
	"context"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/node/membership"
	"github.com/weirlimit/weir/node/persist"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/rulesraft"
)

// member is one node as seen through gossip (clusterview's record).
type member = clusterview.Member

// newCluster builds this node's membership (node/membership). The parts
// it calls exist once New returns; it calls none before Listen.
func (n *Node) newCluster(keyring *memberlist.Keyring) *membership.Cluster {
	cfg := n.cfg
	return membership.New(membership.Config{
		ID: cfg.ID, ClusterName: cfg.ClusterName, GossipAddr: cfg.GossipAddr, Join: cfg.Join,
		BootstrapExpect: cfg.BootstrapExpect, Ring: cfg.Ring,
		ProbeInterval: cfg.GossipProbeInterval, ProbeTimeout: cfg.GossipProbeTimeout,
		GossipInterval: cfg.GossipInterval, SuspicionMult: cfg.GossipSuspicionMult,
		Keyring: keyring, Upgrade: cfg.GossipUpgrade, WrapGossip: cfg.WrapGossip,
		Logger: n.log, Now: cfg.Now, Registry: cfg.Registry,
	}, membership.Deps{
		Prover: memberSecurity{n}, Admitter: memberSecurity{n}, Gateways: memberParts{n},
		Handoff: memberParts{n}, Replicator: memberParts{n}, Restorer: memberParts{n}, Raft: memberParts{n}, Dialer: memberParts{n},
		Published: n.ringPublished,
	})
}

// memberSecurity is membership's view of the security concern.
type memberSecurity struct{ n *Node }

func (s memberSecurity) MemberProof() string { return s.n.sec.MemberProof() }
func (s memberSecurity) ProvenMember(id string, m member) bool {
	return s.n.sec.ProvenMember(id, m)
}
func (s memberSecurity) Admitted(m map[string]member) (map[string]member, bool) {
	return s.n.sec.Admitted(m)
}

// memberParts resolves membership's other parts on the node (they are
// built after it).
type memberParts struct{ n *Node }

func (p memberParts) Gateways() uint32 { return p.n.api.Gateways() }
func (p memberParts) ChangeRing(ctx context.Context, ev replication.RingChanged) error {
	return p.n.counters.handoff.ChangeRing(ctx, ev)
}
func (p memberParts) Routes() *replication.Routes      { return p.n.counters.handoff.Routes() }
func (p memberParts) Seal(place replication.Placement) { p.n.counters.repl.Seal(place) }
func (p memberParts) Restoring(live func(string) bool, haveRing bool) bool {
	return p.n.counters.durable.Restoring(live, haveRing)
}
func (p memberParts) Bootstrap(s []rulesraft.Server) error { return p.n.store.Bootstrap(s) }
func (p memberParts) IsLeader() bool                       { return p.n.store.IsLeader() }
func (p memberParts) Reconcile(ctx context.Context, alive []rulesraft.Server, left []string) error {
	return p.n.store.Reconcile(ctx, alive, left)
}
func (p memberParts) Leader() (string, string)       { return p.n.store.Leader() }
func (p memberParts) LeaderChanged() <-chan struct{} { return p.n.store.LeaderChanged() }
func (p memberParts) Configuration() ([]rulesraft.ServerInfo, error) {
	return p.n.store.Configuration()
}
func (p memberParts) Conn(addr string) (grpc.ClientConnInterface, error) {
	cc, err := p.n.fwd.Conn(addr)
	if err != nil {
		return nil, err // not a nil *grpc.ClientConn in an interface
	}
	return cc, nil
}

// ringPublished tells the parts that follow the ring of a new one.
func (n *Node) ringPublished(v *membership.View) {
	if n.region != nil {
		// Keys that moved here: their ledger is on its way (region.Agent.RingChanged).
		n.region.RingChanged()
	}
	n.pruneForwarders(v.Members)
}

// publishedRing is the published view's ring, nil before the first.
func (n *Node) publishedRing() persist.Ring {
	if v := n.cluster.View(); v != nil {
		return v.Ring
	}
	return nil
}
