package main

import (
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"github.com/weirlimit/weir/bench"
)

// benchFloorCmd is `weir bench floor`, a hidden command: the floor server `weir bench
// --target floor-grpc,floor-http` spawns as its own process, answering
// every request with a fixed reply (bench.ServeFloor), on --listen.
func (c *cli) benchFloorCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "floor --kind grpc|http [--listen ADDR]", Args: noArgs, Hidden: true,
		Short: "Serve a fixed-reply gRPC rate limit service or HTTP check API (the bench's protocol floors)"}
	fs := cmd.Flags()
	kind := fs.String("kind", "", "grpc (Envoy ShouldRateLimit answered OK) or http (every request answered a fixed JSON)")
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *kind != bench.FloorGRPC && *kind != bench.FloorHTTP {
			return usageErr(cmd, "--kind %q: use %s or %s", *kind, bench.FloorGRPC, bench.FloorHTTP)
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("bench floor: %w", err)
		}
		return bench.ServeFloor(cmd.Context(), *kind, ln)
	}
	return cmd
}
