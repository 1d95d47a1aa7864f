package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/client/reqmatch"
	"github.com/weirlimit/weir/examples"
	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/limit/headers"
	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/node/rls"
	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// nodeFlags are the flags of `weir node` and `weir dev`.
type nodeFlags struct {
	id, dataDir, httpAddr, grpcAddr, raftAddr, gossipAddr string
	advertise, adminToken, pprofAddr                      string
	clusterName, gossipKeyFile                            string
	join                                                  []string
	bootstrapExpect, shards                               int
	partitions, vnodes                                    int
	ringLayout                                            string
	maxKeys                                               int64
	replInterval, leaveTimeout                            time.Duration
	reflection, rlsEachDescriptor                         bool
	headerStyle, apiKeyHeader, userHeader, planHeader     string
	logLevel                                              slog.Level
	adminTokenFile                                        string
	rlsTrust, gatewayTokenFile                            string
	gossipUpgrade                                         string
	readTokenFile                                         string
	idleTimeout                                           time.Duration
	tls                                                   tlsFlags
	region                                                regionFlags
	logFormat                                             *logFormat
	persistInterval, restoreWait                          time.Duration
	tracing                                               tracingFlags
}

func (f *nodeFlags) register(fs *pflag.FlagSet, dev bool) {
	def := node.DefaultConfig("")
	id := "node1"
	if h, err := os.Hostname(); err == nil && !dev {
		id = h
	}
	fs.StringVar(&f.id, "id", id, "unique, stable node id")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory for Raft log and snapshots")
	fs.StringVar(&f.httpAddr, "http", def.HTTPAddr, "HTTP API listen address")
	fs.StringVar(&f.grpcAddr, "grpc", def.GRPCAddr, "gRPC listen address")
	fs.StringVar(&f.raftAddr, "raft", def.RaftAddr, "Raft listen address")
	fs.StringVar(&f.gossipAddr, "gossip", def.GossipAddr, "gossip (memberlist) listen address")
	fs.StringVar(&f.advertise, "advertise", "", "`host` (IP or name) peers and clients reach this node at; the listen addresses may then bind 0.0.0.0")
	fs.StringSliceVar(&f.join, "join", nil, "gossip addresses (host[:port]) of existing members, comma-separated or repeated; names are resolved at every attempt, retried with backoff until one answers")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0, "wait for N members, then bootstrap the Raft group once")
	fs.StringVar(&f.adminToken, "admin-token", "", "token required for rule writes")
	fs.TextVar(&f.logLevel, "log-level", slog.LevelInfo, "log `level`: debug, info, warn or error")
	fs.IntVar(&f.shards, "shards", def.Shards, "decision goroutines")
	fs.IntVar(&f.partitions, "partitions", def.Ring.PartitionCount, "the ring's partition count: the same on every member for the cluster's life; a cluster made before 2039 was the default keeps 271 (docs/operations.md)")
	fs.IntVar(&f.vnodes, "vnodes", def.Ring.ReplicationFactor, "virtual nodes per member on the ring's hash circle: the same on every member; a cluster made before keeps 20")
	fs.StringVar(&f.ringLayout, "ring-layout", "balanced", "how the ring places partitions: balanced (every member within ±25% of the mean) or consistent (a cluster made before keeps it); the same on every member")
	fs.Int64Var(&f.maxKeys, "max-keys", 0, "default cap on one rule's live keys on this node, for rules without max_keys (0: 1,000,000); a new key beyond it is answered unavailable (key_cap)")
	fs.DurationVar(&f.replInterval, "replication-interval", def.ReplicationInterval,
		"how often changed counters are shipped to replicas; an owner's death loses at most this much of its decisions")
	leave := def.LeaveTimeout
	if dev {
		leave = time.Second
	}
	fs.DurationVar(&f.leaveTimeout, "leave-timeout", leave, "on SIGTERM, how long to wait for the partitions to be handed off before stopping")
	fs.DurationVar(&f.persistInterval, "persist-interval", def.PersistInterval, "how often counters with an idle deadline an hour or more away (daily, monthly quotas) are written to the data dir; a full-cluster stop loses at most this much of their decisions")
	fs.DurationVar(&f.restoreWait, "restore-wait", def.RestoreWait, "after a full-cluster stop, how long a node that loaded counters from its data dir waits for the other members they were written with before it serves without them")
	withEnv(fs, "persist-interval", "restore-wait")
	fs.BoolVar(&f.reflection, "grpc-reflection", def.GRPCReflection, "serve gRPC server reflection (for grpcurl and other generic clients)")
	fs.StringVar(&f.clusterName, "cluster-name", def.ClusterName, "the cluster's `name`: gossip from a cluster of another name is dropped, so two clusters never merge; the trust domain of its certificates (spiffe://<name>/...)")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", "", "`file` holding the token required for rule writes (instead of --admin-token, which shows in ps)")
	fs.StringVar(&f.gossipKeyFile, "gossip-key-file", "", "`file` holding the gossip keyring: base64 32-byte keys, one a line, the first the primary (weir keyring generate); encrypts gossip and proves peers are nodes. Without it, gossip must bind loopback (without TLS, gossip and Raft are moved there; with TLS, another address is refused)")
	fs.StringVar(&f.gossipUpgrade, "gossip-upgrade", "", "only while moving a running keyless TLS cluster onto --gossip-key-file with rolling restarts: plain, then encrypt (docs/operations.md); both also accept plaintext gossip")
	withEnv(fs, "gossip-upgrade")
	fs.StringVar(&f.headerStyle, "header-style", string(headers.Default), "rate-limit `fields` of /v1/forward-auth and the Envoy rate limit service: a comma-separated list of ietf (RateLimit, RateLimit-Policy), draft (RateLimit-Limit/-Remaining/-Reset) and x (X-RateLimit-*)")
	hn := reqmatch.DefaultHeaderNames()
	fs.StringVar(&f.apiKeyHeader, "api-key-header", hn.APIKey, "header /v1/forward-auth reads the API key from (as weir gateway's)")
	fs.StringVar(&f.userHeader, "user-header", hn.User, "header /v1/forward-auth reads the user id from")
	fs.StringVar(&f.planHeader, "plan-header", hn.Plan, "header /v1/forward-auth reads the plan from")
	fs.BoolVar(&f.rlsEachDescriptor, "rls-each-descriptor", false, "charge each descriptor of an Envoy rate limit request on its own, as envoyproxy/ratelimit does (default: a request's descriptors are all-or-nothing)")
	fs.StringVar(&f.rlsTrust, "rls-trust", "", "what the Envoy rate limit service believes: a comma-separated list of negative-hits (is_negative_hits gives hits back) and overrides (a descriptor's limit replaces the rule's); only for an Envoy you control (docs/gateways.md). Default: neither, the rule's limit applies")
	fs.StringVar(&f.gatewayTokenFile, "gateway-token-file", "", "`file` holding the token gateways send (weir gateway --token-file, client Config.Token) to report decisions and count in fail-open shares; without TLS or it, reports and watches are bounded per connection")
	withEnv(fs, "rls-trust", "gateway-token-file")
	withEnv(fs, "id", "data-dir", "http", "grpc", "raft", "gossip", "advertise", "join", "bootstrap-expect",
		"admin-token", "log-level", "shards", "max-keys", "replication-interval", "leave-timeout", "grpc-reflection",
		"cluster-name", "gossip-key-file", "admin-token-file",
		"header-style", "rls-each-descriptor", "api-key-header", "user-header", "plan-header")
	fs.StringVar(&f.readTokenFile, "read-token-file", "", "`file` holding a token for reads that show keys (events, hot keys, the ops snapshot, a key's limits); with it or an admin token set, those reads need it, the admin token or an admin or node certificate")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", node.DefaultIdleTimeout, "close a client connection idle this long (gRPC: no call; HTTP: between requests)")
	withEnv(fs, "read-token-file", "idle-timeout")
	f.tls.register(fs)
	f.region.register(fs)
	f.logFormat = logFormatFlag(fs)
	f.tracing.register(fs)
	fs.StringVar(&f.pprofAddr, "pprof", "", "serve net/http/pprof on this address (off by default; no environment variable, so children do not inherit it)")
}

func (f *nodeFlags) config(cmd *cobra.Command) (node.Config, error) {
	cfg := node.DefaultConfig(f.id)
	cfg.DataDir = f.dataDir
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr = f.httpAddr, f.grpcAddr, f.raftAddr, f.gossipAddr
	cfg.Advertise = f.advertise
	cfg.GRPCReflection = f.reflection
	cfg.Join = trimAll(f.join)
	cfg.BootstrapExpect = f.bootstrapExpect
	cfg.AdminToken = f.adminToken
	if f.adminTokenFile != "" {
		if f.adminToken != "" {
			return cfg, usageErr(cmd, "--admin-token and --admin-token-file: give one")
		}
		tok, err := readTokenFile(f.adminTokenFile)
		if err != nil {
			return cfg, usageErr(cmd, "--admin-token-file: %v", err)
		}
		cfg.AdminToken = tok
	}
	if f.readTokenFile != "" {
		tok, err := readTokenFile(f.readTokenFile)
		if err != nil {
			return cfg, usageErr(cmd, "--read-token-file: %v", err)
		}
		cfg.ReadToken = tok
	}
	cfg.IdleTimeout = f.idleTimeout
	cfg.ClusterName = f.clusterName
	cfg.TLS = f.tls.files()
	if f.gossipKeyFile != "" {
		keys, err := peerauth.ReadKeyringFile(f.gossipKeyFile)
		if err != nil {
			return cfg, usageErr(cmd, "--gossip-key-file: %v", err)
		}
		cfg.GossipKeys = keys
		if st, err := os.Stat(f.gossipKeyFile); err == nil {
			cfg.GossipKeysWritten = st.ModTime()
		}
	}
	cfg.GossipUpgrade = f.gossipUpgrade
	cfg.Shards = f.shards
	cfg.MaxKeys = f.maxKeys
	style, err := headers.Parse(f.headerStyle)
	if err != nil {
		return cfg, usageErr(cmd, "--header-style: %v", err)
	}
	cfg.HeaderStyle, cfg.RLSEachDescriptor = style, f.rlsEachDescriptor
	if cfg.Ring, err = node.RingShape(f.partitions, f.vnodes, f.ringLayout); err != nil {
		return cfg, usageErr(cmd, "--partitions, --vnodes, --ring-layout: %v", err)
	}
	if cfg.RLSTrust, err = rls.ParseTrust(f.rlsTrust); err != nil {
		return cfg, usageErr(cmd, "--rls-trust: %v", strings.TrimPrefix(err.Error(), "rls: "))
	}
	if f.gatewayTokenFile != "" {
		tok, err := readTokenFile(f.gatewayTokenFile)
		if err != nil {
			return cfg, usageErr(cmd, "--gateway-token-file: %v", err)
		}
		cfg.GatewayToken = tok
	}
	for _, h := range []struct{ flag, v string }{{"api-key-header", f.apiKeyHeader}, {"user-header", f.userHeader}, {"plan-header", f.planHeader}} {
		if strings.TrimSpace(h.v) == "" {
			return cfg, usageErr(cmd, "--%s: must name a header", h.flag)
		}
	}
	cfg.ForwardAuthHeaders = reqmatch.HeaderNames{APIKey: f.apiKeyHeader, User: f.userHeader, Plan: f.planHeader}
	if f.replInterval <= 0 {
		return cfg, usageErr(cmd, "--replication-interval %s: must be > 0", f.replInterval)
	}
	cfg.ReplicationInterval = f.replInterval
	if f.leaveTimeout <= 0 {
		return cfg, usageErr(cmd, "--leave-timeout %s: must be > 0", f.leaveTimeout)
	}
	cfg.LeaveTimeout = f.leaveTimeout
	if f.persistInterval <= 0 || f.restoreWait <= 0 {
		return cfg, usageErr(cmd, "--persist-interval %s, --restore-wait %s: must be > 0", f.persistInterval, f.restoreWait)
	}
	cfg.PersistInterval, cfg.RestoreWait = f.persistInterval, f.restoreWait
	cfg.Logger = newLogger(os.Stderr, *f.logFormat, f.logLevel)
	if err := f.region.apply(cmd, &cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageErr(cmd, "%s", strings.TrimPrefix(err.Error(), "node: invalid config: "))
	}
	return cfg, nil
}

// trimAll trims each item of a list flag ("a, b") and drops empty ones.
func trimAll(items []string) []string {
	var out []string
	for _, s := range items {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// nodeCmd runs one cluster member until SIGINT/SIGTERM, then leaves
// gracefully (hands its partitions off) and stops.
func (c *cli) nodeCmd() *cobra.Command {
	var f nodeFlags
	cmd := &cobra.Command{Use: "node --id ID --data-dir DIR [--join ADDR,...] [--bootstrap-expect N]", Args: noArgs, GroupID: "run",
		Short: "Run one Weir node",
		Long: "Run one Weir node until SIGINT/SIGTERM, then leave gracefully: hand its partitions\n" +
			"to their new owners, then stop. Start the first 3 (or 5) nodes with\n" +
			"--bootstrap-expect 3; later nodes only need --join.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.dataDir == "" {
				return usageErr(cmd, "--data-dir is required (or set WEIR_DATA_DIR)")
			}
			cfg, err := f.config(cmd)
			if err != nil {
				return err
			}
			tp, stopTracing, err := f.tracing.provider(cmd, "weir-node", cfg.ID, cfg.Logger)
			if err != nil {
				return err
			}
			defer stopTracing()
			cfg.Tracer = tp
			if f.pprofAddr != "" {
				stop, err := servePprof(f.pprofAddr, cfg.Logger)
				if err != nil {
					return err
				}
				defer stop()
			}
			return serve(cmd.Context(), cfg, nil)
		},
	}
	f.register(cmd.Flags(), false)
	return cmd
}

// servePprof serves the runtime profiles (net/http/pprof) on addr, apart
// from the API so that they are never exposed by accident.
func servePprof(addr string, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	logger.Info("pprof serving", "addr", ln.Addr().String())
	return func() { srv.Close() }, nil
}

// serve starts a node, calls ready (if any) once it can serve, and on ctx
// cancellation leaves gracefully and closes.
func serve(ctx context.Context, cfg node.Config, ready func(*node.Node) (stop func(), err error)) error {
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	if err := n.Start(); err != nil {
		_ = n.Close()
		return err
	}
	cfg.Logger.Info("weir node started", "id", n.ID(), "http", n.HTTPAddr(), "grpc", n.GRPCAddr(), "raft", n.RaftAddr(), "gossip", n.GossipAddr())
	stop := func() {}
	if ready != nil {
		if err := waitReady(ctx, n); err != nil {
			_ = n.Close()
			return err
		}
		if stop, err = ready(n); err != nil {
			_ = n.Close()
			return err
		}
	}
	<-ctx.Done()
	stop()
	cfg.Logger.Info("shutting down: handing partitions off (a second SIGTERM or SIGINT exits at once)", "leave_timeout", cfg.LeaveTimeout)
	start := time.Now()
	lctx, cancel := context.WithTimeout(context.Background(), cfg.LeaveTimeout)
	defer cancel()
	if err := n.Leave(lctx); err != nil {
		cfg.Logger.Warn("graceful leave incomplete", "err", err)
	}
	err = n.Close()
	cfg.Logger.Info("stopped", "after", time.Since(start).Round(time.Millisecond))
	return err
}

func waitReady(ctx context.Context, n *node.Node) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	deadline := time.After(30 * time.Second)
	for {
		if n.Ready() == nil && n.Store().IsLeader() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("node did not become ready within 30s: %v", n.Ready())
		case <-t.C:
		}
	}
}

// devCmd starts one node with its data in a temporary directory,
// bootstraps it, loads the example rules, starts a gateway in front of a
// built-in echo upstream and prints what to try.
func (c *cli) devCmd() *cobra.Command {
	var f nodeFlags
	cmd := &cobra.Command{Use: "dev", Args: noArgs, GroupID: "run",
		Short: "Run a single node with the example rules, for trying Weir out",
		Long: "Run a single node with its data in a temporary directory (unless --data-dir),\n" +
			"load the example rules, start a gateway in front of a built-in echo upstream\n" +
			"and print what to try. Stop with Ctrl-C."}
	f.register(cmd.Flags(), true)
	gwAddr := cmd.Flags().String("gateway", "127.0.0.1:8000", `gateway listen address, in front of a built-in echo upstream ("off": none)`)
	devTLSOn := cmd.Flags().Bool("tls", false, "make a CA and certificates in <data-dir>/tls and run the node and its gateway with mutual TLS")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if f.dataDir == "" {
			dir, err := os.MkdirTemp("", "weir-dev-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			f.dataDir = dir
		}
		f.bootstrapExpect = 1
		f.join = nil
		var gwFiles, adminFiles tlsconf.Files
		if *devTLSOn {
			if f.tls.files().Set() {
				return usageErr(cmd, "--tls makes its own certificates; leave out --tls-cert, --tls-key and --tls-ca")
			}
			nodeFiles, gw, admin, keyring, err := devTLS(f.dataDir, f.id)
			if err != nil {
				return fmt.Errorf("dev certificates: %w", err)
			}
			f.tls = tlsFlags{cert: nodeFiles.Cert, key: nodeFiles.Key, ca: nodeFiles.CA}
			if f.gossipKeyFile == "" {
				f.gossipKeyFile = keyring
			}
			f.clusterName = "weir"
			gwFiles, adminFiles = gw, admin
		}
		cfg, err := f.config(cmd)
		if err != nil {
			return err
		}
		example, err := rules.ParseFile(examples.RulesYAML)
		if err != nil {
			return fmt.Errorf("embedded example rules: %w", err)
		}
		return serve(ctx, cfg, func(n *node.Node) (func(), error) {
			if set := n.Store().Current(); set == nil || len(set.Rules) == 0 {
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if _, err := n.Store().Apply(actx, rulesraft.Command{Op: rulesraft.OpApply, Rules: example, Author: "weir dev", At: time.Now()}); err != nil {
					return nil, fmt.Errorf("loading example rules: %w", err)
				}
			}
			if *gwAddr == "off" || *gwAddr == "" {
				printDevHelp(c.stdout, n, cfg.DataDir, "", adminFiles)
				return func() {}, nil
			}
			var gwTLS *tls.Config
			if gwFiles.Set() {
				src, err := tlsconf.New(gwFiles, "", cfg.Logger)
				if err != nil {
					return nil, err
				}
				gwTLS = src.ClientConfig()
			}
			stop, addr, err := startDevGateway(ctx, n.GRPCAddr(), *gwAddr, cfg.Logger, gwTLS)
			if err != nil {
				return nil, err
			}
			printDevHelp(c.stdout, n, cfg.DataDir, addr, adminFiles)
			return stop, nil
		})
	}
	return cmd
}

// startDevGateway serves an echo upstream on a free loopback port and a
// gateway in front of it on listen, checking with the node at grpcAddr.
func startDevGateway(ctx context.Context, grpcAddr, listen string, logger *slog.Logger, tc *tls.Config) (stop func(), addr string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("dev echo upstream: %w", err)
	}
	echo := &http.Server{Handler: http.HandlerFunc(echoHandler), ReadHeaderTimeout: 10 * time.Second}
	go echo.Serve(ln)
	cfg := client.DefaultConfig()
	cfg.Cluster, cfg.GatewayID, cfg.Logger, cfg.TLS = []string{grpcAddr}, "dev-gateway", logger, tc
	cfg.Registry = prometheus.NewRegistry()
	gw, err := startGateway(ctx, cfg, &url.URL{Scheme: "http", Host: ln.Addr().String()}, defaultUpstreamOptions(), listen, true)
	if err != nil {
		echo.Close()
		return nil, "", err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := gw.cl.WaitReady(rctx); err != nil {
		gw.close()
		echo.Close()
		return nil, "", fmt.Errorf("dev gateway: %w", err)
	}
	return func() {
		if err := gw.close(); err != nil {
			logger.Warn("dev gateway: close", "err", err)
		}
		echo.Close()
	}, gw.addr, nil
}

// echoHandler is the dev upstream: it answers 200 with what it received.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"upstream": "weir dev echo", "method": r.Method, "path": r.URL.Path,
		"api_key": r.Header.Get("X-API-Key"), "plan": r.Header.Get("X-Plan"),
	})
}

func printDevHelp(w io.Writer, n *node.Node, dataDir, gateway string, admin tlsconf.Files) {
	h := n.HTTPAddr()
	if admin.Set() {
		fmt.Fprintf(w, `weir dev: one node with the example rules is up, with mutual TLS.
  HTTPS https://%[1]s    gRPC %[2]s    data %[3]s

An admin certificate (the admin commands read WEIR_TLS_*):
  export WEIR_TLS_CERT=%[4]s WEIR_TLS_KEY=%[5]s WEIR_TLS_CA=%[6]s
Try:
  weir rules list --addr %[1]s
  weir check --addr %[1]s --key ip:203.0.113.7 --rule login.ip   # 5 per minute
  curl -s --cacert $WEIR_TLS_CA --cert $WEIR_TLS_CERT --key $WEIR_TLS_KEY https://%[1]s/v1/limits/apikey:ak_1
`, h, n.GRPCAddr(), dataDir, admin.Cert, admin.Key, admin.CA)
		if gateway != "" {
			fmt.Fprintf(w, "\nGateway http://%[1]s (plain HTTP for its clients; mutual TLS to the node):\n  curl -si -H 'X-API-Key: ak_1' http://%[1]s/v1/search\n", gateway)
		}
		fmt.Fprintln(w, "Stop with Ctrl-C.")
		return
	}
	fmt.Fprintf(w, `weir dev: one node with the example rules is up.
  HTTP  http://%[1]s    gRPC %[2]s    data %[3]s
  Dashboard  http://%[1]s/ui/

Try:
  weir rules list --addr %[1]s
  weir check --addr %[1]s --key ip:203.0.113.7 --rule login.ip   # 5 per minute
  curl -s -XPOST http://%[1]s/v1/limits/check -H 'Content-Type: application/json' -d '{"key":"apikey:ak_1","rule":"orders.write"}'
  curl -s http://%[1]s/v1/limits/apikey:ak_1
  curl -s http://%[1]s/metrics | grep weir_
  weir events --addr %[1]s --follow          # sampled denials (each rule's first per second), with the rule version
`, h, n.GRPCAddr(), dataDir)
	if gateway != "" {
		fmt.Fprintf(w, `
Gateway http://%[1]s in front of a built-in echo upstream (rule login.ip: 5 per
minute per IP). Watch RateLimit and X-RateLimit-Remaining count down to a 429:
  for i in 1 2 3 4 5 6; do curl -si -XPOST http://%[1]s/v1/login | grep -iE '^(HTTP|ratelimit|x-ratelimit-remaining|retry-after)'; done
  curl -si -H 'X-API-Key: ak_1' http://%[1]s/v1/search
`, gateway)
	}
	fmt.Fprintln(w, "Stop with Ctrl-C.")
}
