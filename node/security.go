package node

import (
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/weirlimit/weir/node/keyringapi"
	"github.com/weirlimit/weir/node/security"
	"github.com/weirlimit/weir/ring"
)

// newSecurity builds the security part (node/security) over this node's
// membership.
func (n *Node) newSecurity(boot uint64, keyring *memberlist.Keyring) (*security.Guard, error) {
	c := n.cfg
	return security.New(security.Config{
		ID: c.ID, ClusterName: c.ClusterName, DataDir: c.DataDir, Boot: boot, TLS: c.TLS,
		AdminToken: c.AdminToken, GatewayToken: c.GatewayToken, ReadToken: c.ReadToken, NodeProof: c.NodeProof,
		GossipUpgrade: c.GossipUpgrade, Keyring: keyring, Ring: c.Ring,
		IdleTimeout: c.idleTimeout(), HTTPReadTimeout: c.HTTPReadTimeout, PeerDialer: c.PeerDialer,
		ReadProof: func(p string) bool { return n.peerReads().Check(p) }, Ctx: n.ctx, Go: n.goFunc,
		Logger: n.log, Registry: c.Registry,
	}, securityMembers{n})
}

// newKeyringAPI is the keyring HTTP edge over the security part.
func (n *Node) newKeyringAPI() *keyringapi.API {
	return keyringapi.New(keyringapi.Config{Self: n.cfg.ID, Keyring: n.sec, Members: securityMembers{n}, Admins: n.sec.Authorizer()})
}

// securityMembers is security.Members over this node's membership.
type securityMembers struct{ n *Node }

func (m securityMembers) Live() map[string]member           { return m.n.cluster.ReadMembers() }
func (m securityMembers) Gossiped(id string) (member, bool) { return m.n.cluster.Lookup(id) }
func (m securityMembers) Leaving() bool                     { return m.n.cluster.Leaving() }
func (m securityMembers) Changed()                          { m.n.cluster.Refresh() }
func (m securityMembers) Announce() error                   { return m.n.cluster.UpdateMeta(time.Second) }
func (m securityMembers) Viewed(id string) (member, bool) {
	if v := m.n.cluster.View(); v != nil {
		mm, ok := v.Members[id]
		return mm, ok
	}
	return member{}, false
}

func (m securityMembers) Ring() *ring.Ring {
	if v := m.n.cluster.View(); v != nil {
		return v.Ring
	}
	return nil
}
