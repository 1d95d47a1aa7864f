package node

import (
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/node/forward"
	"github.com/weirlimit/weir/node/peer"
)

// Node-to-node traffic is two parts: the forwarder table and connection
// pool (node/forward) and the Peer gRPC edge with the replication and
// hand-off clients (node/peer). This file hands them what they take.

// peerDialOptions are the options of every peer connection besides its
// credentials (forward.DialOptions).
func peerDialOptions(cfg Config) []grpc.DialOption { return forward.DialOptions(cfg.PeerDialer) }

func (n *Node) newForwarders() (*forward.Table, error) {
	return forward.New(n.ctx, forward.Config{
		Self:        n.cfg.ID,
		Members:     n.cluster,
		DialOptions: append(append(peerDialOptions(n.cfg), n.sec.PeerCreds()), n.sec.PeerCallOptions()...),
		Registerer:  n.cfg.Registry,
		Tracer:      n.tracer(),
		Timeout:     n.cfg.ForwardTimeout,
		MaxBatch:    n.cfg.ForwardMaxBatch,
		Inflight:    n.cfg.ForwardInflight,
	})
}

func (n *Node) newPeerServer() *peer.Server {
	return peer.NewServer(peer.Config{
		Checker: n.router, Guard: n.sec, Identity: n.sec, Replicas: n.counters.replicas, Handoff: n.counters.handoff,
		RuleVersion: func() uint64 { return n.rules().Version }, Now: n.cfg.Now, Tracer: n.tracer(), Logger: n.log,
	})
}

// pruneForwarders drops the forwarders of members no longer live.
func (n *Node) pruneForwarders(live map[string]member) {
	n.fwd.Prune(func(id string) bool { _, ok := live[id]; return ok })
}
