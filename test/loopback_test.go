package test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/node"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// hostIP is a non-loopback IPv4 address of this machine ("" if none).
func hostIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// A node with neither TLS nor a gossip key, told to listen on every
// address, binds gossip and Raft to loopback, and its Peer service refuses
// a caller from another address while one on loopback passes. With a key,
// the same config binds every address.
func TestNoKeyMeansLoopbackPeers(t *testing.T) {
	ip := hostIP()
	if ip == "" {
		t.Skip("no non-loopback IPv4 address on this machine to call from")
	}
	cfg := testcluster.Config(t, "solo")
	cfg.GossipAddr, cfg.RaftAddr, cfg.GRPCAddr = "0.0.0.0:0", "0.0.0.0:0", "0.0.0.0:0"
	cfg.BootstrapExpect = 1
	c := &testcluster.Cluster{T: t}
	t.Cleanup(c.Close)
	n := c.Start(cfg)
	c.WaitStable(1)
	if h, _, _ := net.SplitHostPort(n.RaftAddr()); h != "127.0.0.1" {
		t.Errorf("raft on %s, want loopback", n.RaftAddr())
	}
	if h, _, _ := net.SplitHostPort(n.GossipAddr()); h != "127.0.0.1" {
		t.Errorf("gossip on %s, want loopback", n.GossipAddr())
	}
	_, port, _ := net.SplitHostPort(n.GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &weirv1.ReplicateRequest{From: "x", States: []*weirv1.CounterState{{Partition: 1, Id: 1, A: 1}}}
	_, err := outsiderPeer(t, net.JoinHostPort(ip, port)).Replicate(ctx, req)
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("Replicate from %s: %v, want Unauthenticated", ip, err)
	}
	if _, err := outsiderPeer(t, net.JoinHostPort("127.0.0.1", port)).Replicate(ctx, req); err != nil {
		t.Errorf("Replicate from loopback: %v", err)
	}

	keyed := testcluster.Config(t, "keyed")
	keyed.GossipAddr, keyed.RaftAddr = "0.0.0.0:0", "0.0.0.0:0"
	keyed.GossipKeys = [][]byte{peerauth.GenerateKey()}
	nd, err := node.New(keyed)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	if h, _, _ := net.SplitHostPort(nd.RaftAddr()); h == "127.0.0.1" {
		t.Errorf("keyed node's raft on %s, want every address", nd.RaftAddr())
	}
}
