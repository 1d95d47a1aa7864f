package testcluster

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// Front starts a gRPC server on loopback in front of the node at addr:
// register puts services on it that relay to the node over to (e.g. a
// stand-in for an older node that lacks some RPCs). It returns the front's
// address; the test's cleanup stops it.
func Front(t testing.TB, addr string, register func(s *grpc.Server, to *grpc.ClientConn)) string {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv, cc)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-served })
	return lis.Addr().String()
}

// PeerClient is a Peer client of the node at addr, as another node's
// (plain text, from loopback); the test's cleanup closes it.
func PeerClient(t testing.TB, addr string) weirv1.PeerClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return weirv1.NewPeerClient(cc)
}
