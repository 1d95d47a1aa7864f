package node

import (
	"github.com/weirlimit/weir/node/api"
	"github.com/weirlimit/weir/node/ops"
	"github.com/weirlimit/weir/node/opsapi"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// initOps builds the operators' view and its edge (called by New, after
// the metrics, the store and the shards).
func (n *Node) initOps() {
	c := ops.Config{ID: n.cfg.ID, Now: n.now, Registry: n.cfg.Registry, Logger: n.log.With("component", "ops"),
		PeerAuth: n.peerReads().Authorize}
	c.PeerTLS = n.sec.PeerTLS()
	n.ops = ops.New(n.ctx, c, opsRules{n}, n.store, opsMembers{n}, n.engine)
}

// opsRules is the node's rule view as ops.RuleView.
type opsRules struct{ n *Node }

func (r opsRules) Version() uint64 { return r.n.rules().Version }
func (r opsRules) Rule(id string) (rules.Rule, bool) {
	if cr := r.n.rules().Rules[id]; cr != nil {
		return cr.Rule, true
	}
	return rules.Rule{}, false
}

// opsMembers is the node's membership as ops.Members.
type opsMembers struct{ n *Node }

func (m opsMembers) Members() api.Members { return m.n.Members() }
func (m opsMembers) Peers() map[string]string {
	v := m.n.cluster.View()
	out := map[string]string{}
	if v == nil {
		return out
	}
	for id, mb := range v.Members {
		if id != m.n.cfg.ID && mb.HTTP != "" {
			out[id] = mb.HTTP
		}
	}
	return out
}

// peerReads is this node's credential on other members' parts of a
// cluster-wide read, and the check of theirs.
func (n *Node) peerReads() opsapi.PeerCredential {
	c := opsapi.PeerCredential{Self: n.cfg.ID, TLS: n.sec.TLS() != nil, ReadToken: n.cfg.ReadToken, AdminToken: n.cfg.AdminToken}
	if a := n.sec.Authenticator(); a != nil {
		c.Keys = a
	}
	return c
}
