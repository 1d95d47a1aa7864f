// Package grpcwin holds the transport settings of every Weir gRPC
// connection, gateway to node (checks) and node to node (forwards,
// replication, hand-off): the HTTP/2 flow-control windows below, and the
// codec (Codec, in codec.go).
//
// grpc-go normally estimates each connection's bandwidth-delay product and
// grows its windows from 64 KiB; to do so it sends a PING when data
// arrives and waits for the ack. Weir's traffic is many small messages, so
// that is one more frame, and often one more write, per message. A static
// window on both the stream and the connection turns the estimation off
// (setting only one of them would leave the other at 64 KiB). Measured on
// `steady` through the SDK, 3 nodes, alternating runs: 18.6k, 16.5k, 17.2k,
// 15.7k, 13.1k checks/s without, 22.1k, 22.0k, 20.9k, 20.8k, 15.9k with.
//
// 1 MiB bounds what one stream may have in flight unread; Weir's messages
// are far smaller.
//
// Keepalive: a connection that has received nothing for KeepaliveTime is
// pinged, and closed when the ping is not answered within
// KeepaliveTimeout. A link cut without a reset (a network split, a host
// gone) leaves the TCP connection looking open, and without keepalive
// every call on it waits out its own deadline until the kernel gives up,
// minutes later; after the heal the old connection comes back only at the
// kernel's next retransmission, seconds later. With it the dead connection
// is closed within KeepaliveTime+KeepaliveTimeout, calls fail fast (the
// fail mode or a retry decides), and a fresh connection is dialled (peer
// connections back off at most one second) as soon as the link is back.
// The server side permits pings this often.
package grpcwin

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// KeepaliveTime and KeepaliveTimeout: see the package comment.
const (
	KeepaliveTime    = 2 * time.Second
	KeepaliveTimeout = 2 * time.Second
)

// Window is the static per-stream and per-connection window, in bytes.
const Window = 1 << 20

// DialOptions are the window settings, keepalive and the codec for a
// client connection.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(Window), grpc.WithInitialConnWindowSize(Window),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec{}))}
}

// ServerOptions are the window settings, the keepalive policy (clients
// may ping every KeepaliveTime/2, with or without calls) and the codec for
// a server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(Window), grpc.InitialConnWindowSize(Window),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveTime / 2, PermitWithoutStream: true}),
		grpc.ForceServerCodecV2(Codec{})}
}
