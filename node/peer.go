package node

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/weirlimit/weir/limit"
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
		Members:     peerAddrs{n},
		DialOptions: append(append(peerDialOptions(n.cfg), n.sec.PeerCreds()), n.sec.PeerCallOptions()...),
		Registerer:  n.cfg.Registry,
		Tracer:      n.tracer,
		Timeout:     n.cfg.ForwardTimeout,
		MaxBatch:    n.cfg.ForwardMaxBatch,
		Inflight:    n.cfg.ForwardInflight,
	})
}

func (n *Node) newPeerServer() *peer.Server {
	return peer.NewServer(peer.Config{
		Checker: forwardedChecks{n}, Guard: n.sec, Identity: n.sec, Replicas: n.replicas, Handoff: n.handoff,
		RuleVersion: func() uint64 { return n.rules().Version }, Now: n.now, Tracer: n.tracer, Logger: n.log,
	})
}

// peerAddrs resolves member ids in the current view (forward.Members).
type peerAddrs struct{ n *Node }

func (a peerAddrs) PeerAddr(id string) (string, error) {
	v := a.n.cluster.View()
	if v == nil {
		return "", fmt.Errorf("%w: no view", errUnavailable)
	}
	addr, ok := v.Addr(id)
	if !ok {
		return "", fmt.Errorf("%w: unknown member %q", errUnavailable, id)
	}
	return addr, nil
}

// forwardedChecks decides a peer's items (peer.Checker).
type forwardedChecks struct{ n *Node }

func (c forwardedChecks) CheckForwarded(ctx context.Context, items []limit.Item, res []limit.Result) error {
	return c.n.router.CheckForwarded(ctx, items, res)
}

// pruneForwarders drops the forwarders of members no longer live.
func (n *Node) pruneForwarders(live map[string]member) {
	n.fwd.Prune(func(id string) bool { _, ok := live[id]; return ok })
}

// replicaPlacement lists where a partition's copies go (not this node).
func (n *Node) replicaPlacement(p uint32) []string {
	v := n.cluster.View()
	if v == nil {
		return nil
	}
	if int(p) >= len(v.Peers) {
		return nil
	}
	return v.Peers[p] // shared: the replicator only reads it
}
