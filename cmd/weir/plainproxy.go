package main

import (
	"net/http"
	"net/http/httputil"
	"net/url"

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
		return c.serveHTTP(cmd.Context(), "plainproxy", *listen, proxy)
	}
	return cmd
}
