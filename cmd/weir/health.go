package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthCmd asks a node's grpc.health.v1.Health service whether it serves:
// the health check of a FROM scratch image, which has no shell or curl.
// Exit 0 for SERVING, 1 for anything else (NOT_SERVING, unreachable).
func (c *cli) healthCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "health [--addr ADDR]", Args: noArgs,
		Short: "Check a node's gRPC health: exit 0 when SERVING, 1 otherwise",
		Long: "Ask the grpc.health.v1.Health service on a node's gRPC port whether it serves.\n" +
			"A node is SERVING once it has a ring and the rules, and NOT_SERVING before\n" +
			"that and while it leaves. Exit 0 when SERVING, 1 otherwise (for container\n" +
			"health checks: the image has no shell or curl)."}
	fs := cmd.Flags()
	addr := fs.String("addr", "127.0.0.1:9090", "the node's gRPC `address`")
	service := fs.String("service", "", "ask about one service (e.g. weir.v1.Limiter) instead of the whole node")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	var tf tlsFlags
	tf.register(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if _, _, err := net.SplitHostPort(*addr); err != nil {
			return usageErr(cmd, "--addr %q: want host:port", *addr)
		}
		creds := insecure.NewCredentials()
		tc, err := tf.client(cmd, nil)
		if err != nil {
			return err
		}
		if tc != nil {
			creds = credentials.NewTLS(tc)
		}
		cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
		defer cancel()
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: *service})
		if err != nil {
			if strings.Contains(err.Error(), "looked like an HTTP/1.1 header") {
				return fmt.Errorf("health %s: it answers HTTP/1.1, so it is likely a node's HTTP port; --addr takes the gRPC address (the node's --grpc, default port 9090): %w", *addr, err)
			}
			return fmt.Errorf("health %s: %w", *addr, err)
		}
		if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health %s: %s", *addr, st)
		}
		_, err = fmt.Fprintln(c.stdout, healthpb.HealthCheckResponse_SERVING)
		return err
	}
	return cmd
}

// echoCmd serves the echo upstream on its own, for a gateway to stand in
// front of (the compose example; `weir dev` runs one built in).
func (c *cli) echoCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "echo [--listen ADDR]", Args: noArgs, GroupID: "run",
		Short: "Serve an HTTP upstream that answers every request with what it received, as JSON"}
	listen := cmd.Flags().String("listen", "127.0.0.1:3000", "address to serve on")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return c.serveHTTP(cmd.Context(), "echo", *listen, http.HandlerFunc(echoHandler))
	}
	return cmd
}

// serveHTTP serves h on listen until ctx ends, then shuts the server down
// (up to 5 s for requests in flight). name prefixes errors and the
// "serving on" line.
func (c *cli) serveHTTP(ctx context.Context, name, listen string, h http.Handler) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("%s: listen %s: %w", name, listen, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(c.stderr, "weir %s: serving on %s\n", name, ln.Addr())
	select {
	case err := <-errc:
		return fmt.Errorf("%s: %w", name, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
