package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/spf13/cobra"
)

// plainProxyCmd is a hidden command: a plain net/http/httputil reverse
// proxy to --upstream, with no check and nothing of Weir's, tuned only as
// any Go proxy in production is (a transport keeping many idle connections
// per host). `weir bench --target plainproxy` runs it as its own process,
// as it runs `weir gateway`, so the gateway's cost over Go's proxy is the
// difference of two rows of one run.
func (c *cli) plainProxyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "plainproxy --listen ADDR --upstream URL", Args: noArgs, Hidden: true,
		Short: "Run a plain Go reverse proxy (httputil.ReverseProxy) to compare weir gateway with"}
	fs := cmd.Flags()
	listen := fs.String("listen", "127.0.0.1:8000", "address to serve on")
	upstream := fs.String("upstream", "", "URL to proxy to (required)")
	idle := fs.Int("idle-conns", 256, "idle connections kept per upstream host")
	pool := fs.Bool("buffer-pool", false, "lend the proxy pooled copy buffers, as weir gateway does (default: httputil's 32 KiB allocation per response)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		up, err := url.Parse(*upstream)
		if err != nil || up.Scheme == "" || up.Host == "" {
			return usageErr(cmd, "--upstream %q: need an absolute URL such as http://127.0.0.1:9000", *upstream)
		}
		proxy := httputil.NewSingleHostReverseProxy(up)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = *idle, *idle
		proxy.Transport = tr
		if *pool {
			proxy.BufferPool = copyBuffers
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("plainproxy: listen %s: %w", *listen, err)
		}
		srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		fmt.Fprintf(c.stderr, "weir plainproxy: serving on %s\n", ln.Addr())
		select {
		case err := <-errc:
			return fmt.Errorf("plainproxy: %w", err)
		case <-cmd.Context().Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = srv.Shutdown(sctx)
		if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
		return err
	}
	return cmd
}
