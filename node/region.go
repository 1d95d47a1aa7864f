package node

import (
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/region"
)

// Multi-region mode (package region): a node with Config.Region set runs a
// region.Agent beside its shards. For a rule with scope: global, the key's
// owner decides with the rule's limit scaled to this region's share of the
// key and tallies every decision for the exchange (node/router's region
// hooks). Other nodes forward to the owner as for any rule.

// newRegionAgent builds the agent for cfg.Region, dialing peer regions
// with the node's own peer dial options (TLS when configured) plus
// RegionDialer when a test sets one.
func (n *Node) newRegionAgent() (*region.Agent, error) {
	rc := n.cfg.Region
	// The same credentials and options as the peer connections (node/forward): when TLS is
	// configured for peers, regions use it too.
	// The same credentials as peer calls: with TLS, a node certificate
	// (regions then share the CA and the cluster name); with a gossip key,
	// the node proof (regions then share the keyring).
	rc.DialOptions = append(append(append([]grpc.DialOption{n.sec.PeerCreds()},
		peerDialOptions(n.cfg)...), n.sec.PeerCallOptions()...), rc.DialOptions...)
	if n.cfg.RegionDialer != nil {
		rc.DialOptions = append(rc.DialOptions, grpc.WithContextDialer(n.cfg.RegionDialer))
	}
	rc.Logger = n.log.With("component", "region", "region", rc.Region)
	if rc.Now == nil {
		rc.Now = n.now
	}
	a, err := region.New(rc, regionCluster{n})
	if err != nil {
		return nil, err
	}
	reg := n.cfg.Registry
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_region_exchanges_total",
			Help: "Exchanges this node sent to peer regions."}, func() float64 { return float64(a.Counters().Exchanges) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "weir_region_exchange_failures_total",
			Help: "Exchanges to peer regions that failed (unreachable, timeout, refused)."}, func() float64 { return float64(a.Counters().Failures) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_region_shared_keys",
			Help: "Global keys this node holds shares of."}, func() float64 { return float64(a.Counters().Keys) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "weir_region_minority",
			Help: "1 while this node is cut off from a majority of the regions (its global keys hold their floor)."}, func() float64 {
			if a.Counters().Minority {
				return 1
			}
			return 0
		}),
	)
	return a, nil
}

// regionCluster answers the agent's ownership questions from the ring
// (the router's, built after the agent).
type regionCluster struct{ n *Node }

func (c regionCluster) Owner(key string) (self bool, addr string, ok bool) {
	return c.n.router.Owner(key)
}

// Region returns the node's region agent (nil without Config.Region).
func (n *Node) Region() *region.Agent { return n.region }
