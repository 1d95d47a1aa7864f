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
package grpcwin

import "google.golang.org/grpc"

// Window is the static per-stream and per-connection window, in bytes.
const Window = 1 << 20

// DialOptions are the window settings and the codec for a client
// connection.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(Window), grpc.WithInitialConnWindowSize(Window),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec{}))}
}

// ServerOptions are the window settings and the codec for a server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(Window), grpc.InitialConnWindowSize(Window),
		grpc.ForceServerCodecV2(Codec{})}
}
