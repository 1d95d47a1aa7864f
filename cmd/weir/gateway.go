package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit/headers"
)

// gatewayCmd runs a reverse proxy to --upstream that checks every request
// with the Weir cluster (client.Middleware) until ctx ends, then shuts
// down cleanly. GET /readyz on the listen address is the gateway's own
// (503 until it holds a rule set); GET /metrics is the client's metrics
// only when --metrics is set (it would otherwise shadow an upstream path).
func (c *cli) gatewayCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "gateway --listen ADDR --upstream URL --cluster ADDR,...", Args: noArgs, GroupID: "run",
		Short: "Run a gateway that checks each request with Weir",
		Long: "Run a reverse proxy to --upstream that checks each request with the Weir cluster.\n" +
			"Until it holds a rule set (from the cluster, or from --rules-cache when the cluster\n" +
			"is unreachable) requests follow --until-rules, and GET /readyz, answered by the\n" +
			"gateway itself, says 503; then 200."}
	def := client.DefaultConfig()
	fs := cmd.Flags()
	listen := fs.String("listen", "127.0.0.1:8000", "address to serve on")
	upstream := fs.String("upstream", "", "URL of the API to protect (required)")
	cluster := fs.StringSlice("cluster", nil, "node gRPC addresses (comma-separated or repeated)")
	apiKey := fs.String("api-key-header", def.APIKeyHeader, "header carrying the API key")
	user := fs.String("user-header", def.UserHeader, "header carrying the user id")
	plan := fs.String("plan-header", def.PlanHeader, "header carrying the plan")
	trusted := fs.StringSlice("trusted-proxies", nil, "CIDRs whose X-Forwarded-For/Forwarded are believed (comma-separated or repeated)")
	host, _ := os.Hostname()
	id := fs.String("id", "gw-"+host+"-"+fmt.Sprint(os.Getpid()), "gateway id (unique per gateway)")
	metrics := fs.Bool("metrics", false, "serve the client's Prometheus metrics on /metrics")
	rulesCache := fs.String("rules-cache", "", "`path` of a file keeping the last rule set from the cluster, used at start until the cluster answers (empty: none)")
	untilRules := fs.String("until-rules", string(def.UntilRules), "`policy` while no rule set is held: wait (up to --until-rules-timeout, then deny), deny (503) or allow (no limits)")
	untilTimeout := fs.Duration("until-rules-timeout", def.UntilRulesTimeout, "how long --until-rules wait holds a request before denying it")
	upOpts := defaultUpstreamOptions()
	upOpts.flags(fs)
	headerStyle := fs.String("header-style", string(headers.Default), "rate-limit response `fields`: a comma-separated list of ietf (RateLimit, RateLimit-Policy), draft (RateLimit-Limit/-Remaining/-Reset) and x (X-RateLimit-*)")
	tokenFile := fs.String("token-file", "", "`file` holding the cluster's gateway token (weir node --gateway-token-file), sent on every call; for a cluster without TLS")
	withEnv(fs, "token-file")
	withEnv(fs, "cluster", "rules-cache", "until-rules", "until-rules-timeout", "header-style")
	var tf tlsFlags
	tf.register(fs)
	var trf tracingFlags
	trf.register(fs)
	logFmt := logFormatFlag(fs)
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this address, apart from the proxy (off by default; no environment variable)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		up, err := url.Parse(*upstream)
		if err != nil || up.Scheme == "" || up.Host == "" {
			return usageErr(cmd, "--upstream %q: need an absolute URL such as http://127.0.0.1:9000", *upstream)
		}
		if err := upOpts.validate(); err != nil {
			return usageErr(cmd, "%v", err)
		}
		cfg := def
		cfg.APIKeyHeader, cfg.UserHeader, cfg.PlanHeader, cfg.GatewayID = *apiKey, *user, *plan, *id
		cfg.Cluster = trimAll(*cluster)
		cfg.RulesCache = *rulesCache
		if *tokenFile != "" {
			if cfg.Token, err = readTokenFile(*tokenFile); err != nil {
				return usageErr(cmd, "--token-file: %v", err)
			}
		}
		style, err := headers.Parse(*headerStyle)
		if err != nil {
			return usageErr(cmd, "--header-style: %v", err)
		}
		cfg.HeaderStyle = style
		switch u := client.UntilRules(*untilRules); {
		case u != client.UntilRulesWait && u != client.UntilRulesDeny && u != client.UntilRulesAllow:
			return usageErr(cmd, "--until-rules %q: want wait, deny or allow", *untilRules)
		case *untilTimeout <= 0:
			return usageErr(cmd, "--until-rules-timeout %s: must be > 0", *untilTimeout)
		default:
			cfg.UntilRules, cfg.UntilRulesTimeout = u, *untilTimeout
		}
		for _, s := range trimAll(*trusted) {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil {
					return usageErr(cmd, "--trusted-proxies: %q is not a CIDR or address", s)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			cfg.TrustedProxies = append(cfg.TrustedProxies, p)
		}
		logger := newLogger(c.stderr, *logFmt, slog.LevelInfo)
		cfg.Logger = logger
		if cfg.TLS, err = tf.client(cmd, logger); err != nil {
			return err
		}
		reg := prometheus.NewRegistry()
		cfg.Registry = reg
		if err := cfg.Validate(); err != nil {
			return usageErr(cmd, "%s", strings.TrimPrefix(err.Error(), client.ErrInvalidConfig.Error()+": "))
		}
		tp, stopTracing, err := trf.provider(cmd, "weir-gateway", *id, logger)
		if err != nil {
			return err
		}
		defer stopTracing()
		cfg.Tracer = tp
		if *pprofAddr != "" {
			stop, err := servePprof(*pprofAddr, logger)
			if err != nil {
				return err
			}
			defer stop()
		}
		gw, err := startGateway(cmd.Context(), cfg, up, upOpts, *listen, *metrics)
		if err != nil {
			return err
		}
		logger.Info("weir gateway started", "listen", gw.addr, "upstream", up.String(), "cluster", cfg.Cluster,
			"until_rules", cfg.UntilRules, "rules_cache", cfg.RulesCache, "rules_version", gw.cl.RulesVersion())
		select {
		case err := <-gw.errc:
			gw.cl.Close()
			return fmt.Errorf("gateway: serve: %w", err)
		case <-cmd.Context().Done():
		}
		return gw.close()
	}
	return cmd
}

// gateway is a running reverse proxy guarded by the client middleware.
type gateway struct {
	addr string
	cl   *client.Client
	srv  *http.Server
	errc chan error // the serve loop's end
}

// startGateway starts a client for cfg (cfg.Registry must be set) and
// serves a reverse proxy to up on listen through its middleware. GET
// /readyz is answered by the gateway (readyz). With metrics, GET /metrics
// serves the client's registry instead of the upstream's path.
func startGateway(ctx context.Context, cfg client.Config, up *url.URL, upOpts upstreamOptions, listen string, metrics bool) (*gateway, error) {
	cl, err := client.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	proxy := upstreamProxy(up, upOpts, cfg.Logger)
	mux := http.NewServeMux()
	if metrics {
		mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { readyz(w, cl.RulesStatus()) })
	h := cl.Middleware()(proxy)
	if cfg.Tracer != nil {
		h = traceProxy(cfg.Tracer.Tracer(tracing.Name), h)
	}
	mux.Handle("/", h)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("gateway: listen %s: %w", listen, err)
	}
	g := &gateway{addr: ln.Addr().String(), cl: cl, errc: make(chan error, 1),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { g.errc <- g.srv.Serve(ln) }()
	return g, nil
}

// close stops serving (waiting up to 5 s for requests in flight) and
// closes the client.
func (g *gateway) close() error {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := g.srv.Shutdown(sctx)
	if serr := <-g.errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if cerr := g.cl.Close(); err == nil {
		err = cerr
	}
	return err
}

// readyz answers a gateway's readiness: 503 until it holds a rule set
// (from the cluster or its rules cache; until then requests follow
// --until-rules), 200 after, the body saying which and why.
func readyz(w http.ResponseWriter, st client.RulesStatus) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	code, msg := http.StatusOK, fmt.Sprintf("ready: rules version %d from the cluster", st.Version)
	switch {
	case !st.Ready:
		code, msg = http.StatusServiceUnavailable, "not ready: no rule set yet (none from the cluster, none in a rules cache)"
		w.Header().Set("Retry-After", "1")
	case st.Cached:
		msg = fmt.Sprintf("ready: rules version %d from the rules cache; none from the cluster yet", st.Version)
	}
	if st.Err != nil {
		msg += "; rules watch: " + st.Err.Error()
	}
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}
