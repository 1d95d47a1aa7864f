package peerauth

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

func TestLoopbackOnly(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5000": true, "127.0.0.3:5000": true, "[::1]:5000": true, "[::ffff:127.0.0.1]:1": true,
		"10.0.0.5:5000": false, "[fd00::2]:5000": false, "192.168.1.1:1": false,
	} {
		tcp, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: tcp})
		if _, ok := LoopbackOnly(ctx); ok != want {
			t.Errorf("LoopbackOnly(%s) = %v, want %v", addr, ok, want)
		}
	}
	if _, ok := LoopbackOnly(context.Background()); ok {
		t.Error("a call without a peer passed")
	}
}

func TestVerifyMetadata(t *testing.T) {
	kr := keyring(t, GenerateKey())
	a := New("weir", kr)
	md, err := a.Credentials("n3").GetRequestMetadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.New(md))
	if id, ok := a.Verify(ctx); !ok || id != "n3" {
		t.Fatalf("Verify = %q %v, want n3 true", id, ok)
	}
	twice := metadata.Pairs(MetadataKey, md[MetadataKey], MetadataKey, md[MetadataKey])
	if _, ok := a.Verify(metadata.NewIncomingContext(context.Background(), twice)); ok {
		t.Error("two proofs accepted")
	}
	if _, ok := a.Verify(context.Background()); ok {
		t.Error("no metadata accepted")
	}
}
