package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/examples"
	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// nodeFlags binds the flags shared by `weir node` and `weir dev`. Every flag
// also reads WEIR_<NAME> from the environment (flags win).
type nodeFlags struct {
	id, dataDir, httpAddr, grpcAddr, raftAddr, gossipAddr string
	join, adminToken, logLevel, pprofAddr, replInterval   string
	bootstrapExpect, shards                               int
}

func (f *nodeFlags) register(fs *flag.FlagSet, dev bool) {
	env := func(name, def string) string {
		if v := os.Getenv("WEIR_" + name); v != "" {
			return v
		}
		return def
	}
	envInt := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv("WEIR_" + name)); err == nil {
			return v
		}
		return def
	}
	def := node.DefaultConfig("")
	id := "node1"
	if h, err := os.Hostname(); err == nil && !dev {
		id = h
	}
	fs.StringVar(&f.id, "id", env("ID", id), "unique, stable node id (WEIR_ID)")
	fs.StringVar(&f.dataDir, "data-dir", env("DATA_DIR", ""), "directory for Raft log and snapshots (WEIR_DATA_DIR)")
	fs.StringVar(&f.httpAddr, "http", env("HTTP", def.HTTPAddr), "HTTP API listen address (WEIR_HTTP)")
	fs.StringVar(&f.grpcAddr, "grpc", env("GRPC", def.GRPCAddr), "gRPC listen address (WEIR_GRPC)")
	fs.StringVar(&f.raftAddr, "raft", env("RAFT", def.RaftAddr), "Raft listen address (WEIR_RAFT)")
	fs.StringVar(&f.gossipAddr, "gossip", env("GOSSIP", def.GossipAddr), "gossip (memberlist) listen address (WEIR_GOSSIP)")
	fs.StringVar(&f.join, "join", env("JOIN", ""), "comma-separated gossip addresses of existing members (WEIR_JOIN)")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", envInt("BOOTSTRAP_EXPECT", 0), "wait for N members, then bootstrap the Raft group once (WEIR_BOOTSTRAP_EXPECT)")
	fs.StringVar(&f.adminToken, "admin-token", env("ADMIN_TOKEN", ""), "token required for rule writes (WEIR_ADMIN_TOKEN)")
	fs.StringVar(&f.logLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error (WEIR_LOG_LEVEL)")
	fs.IntVar(&f.shards, "shards", envInt("SHARDS", def.Shards), "decision goroutines (WEIR_SHARDS)")
	fs.StringVar(&f.replInterval, "replication-interval", env("REPLICATION_INTERVAL", def.ReplicationInterval.String()),
		"how often changed counters are shipped to replicas; an owner's death loses at most this much of its decisions (WEIR_REPLICATION_INTERVAL)")
	fs.StringVar(&f.pprofAddr, "pprof", "", "serve net/http/pprof on this address (off by default; no environment variable, so children do not inherit it)")
}

func (f *nodeFlags) config() (node.Config, error) {
	cfg := node.DefaultConfig(f.id)
	cfg.DataDir = f.dataDir
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr = f.httpAddr, f.grpcAddr, f.raftAddr, f.gossipAddr
	for _, j := range strings.Split(f.join, ",") {
		if j = strings.TrimSpace(j); j != "" {
			cfg.Join = append(cfg.Join, j)
		}
	}
	cfg.BootstrapExpect = f.bootstrapExpect
	cfg.AdminToken = f.adminToken
	cfg.Shards = f.shards
	d, err := time.ParseDuration(f.replInterval)
	if err != nil || d <= 0 {
		return cfg, &usageError{msg: fmt.Sprintf("--replication-interval %q: want a positive duration such as 5ms", f.replInterval), help: "weir help node"}
	}
	cfg.ReplicationInterval = d
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return cfg, &usageError{msg: fmt.Sprintf("--log-level %q: use debug, info, warn or error", f.logLevel), help: "weir help node"}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if err := cfg.Validate(); err != nil {
		return cfg, &usageError{msg: strings.TrimPrefix(err.Error(), "node: invalid config: "), help: "weir help node"}
	}
	return cfg, nil
}

func parseFlags(fs *flag.FlagSet, args []string, synopsis string) error {
	fs.SetOutput(new(strings.Builder))
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			var b strings.Builder
			fs.SetOutput(&b)
			fmt.Fprintf(&b, "usage: %s\n\nflags:\n", synopsis)
			fs.PrintDefaults()
			return &helpShown{text: b.String()}
		}
		return &usageError{msg: err.Error(), synopsis: synopsis}
	}
	if fs.NArg() > 0 {
		return &usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0)), synopsis: synopsis}
	}
	return nil
}

// runNode runs one cluster member until SIGINT/SIGTERM, then leaves
// gracefully (hands its partitions off) and stops.
func runNode(ctx context.Context, args []string) error {
	var f nodeFlags
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	f.register(fs, false)
	if err := parseFlags(fs, args, "weir node --id ID --data-dir DIR [--http ADDR] [--grpc ADDR] [--raft ADDR] [--gossip ADDR] [--join ADDR,...] [--bootstrap-expect N] [--admin-token T]"); err != nil {
		return err
	}
	if f.dataDir == "" {
		return &usageError{msg: "--data-dir is required (or set WEIR_DATA_DIR)", help: "weir help node"}
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	if f.pprofAddr != "" {
		stop, err := servePprof(f.pprofAddr, cfg.Logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	return serve(ctx, cfg, nil)
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
	cfg.Logger.Info("shutting down: handing partitions off")
	lctx, cancel := context.WithTimeout(context.Background(), cfg.LeaveTimeout)
	defer cancel()
	if err := n.Leave(lctx); err != nil {
		cfg.Logger.Warn("graceful leave incomplete", "err", err)
	}
	return n.Close()
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

// runDev starts one node with its data in a temporary directory, bootstraps
// it, loads the example rules, starts a gateway in front of a built-in echo
// upstream and prints what to try.
func runDev(ctx context.Context, args []string, stdout io.Writer) error {
	var f nodeFlags
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	f.register(fs, true)
	gwAddr := fs.String("gateway", "127.0.0.1:8000", `gateway listen address, in front of a built-in echo upstream ("off": none)`)
	if err := parseFlags(fs, args, "weir dev [--data-dir DIR] [--http ADDR] [--grpc ADDR] [--raft ADDR] [--gossip ADDR] [--gateway ADDR|off]"); err != nil {
		return err
	}
	if f.dataDir == "" {
		dir, err := os.MkdirTemp("", "weir-dev-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		f.dataDir = dir
	}
	f.bootstrapExpect = 1
	f.join = ""
	cfg, err := f.config()
	if err != nil {
		return err
	}
	cfg.LeaveTimeout = time.Second
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
			printDevHelp(stdout, n, cfg.DataDir, "")
			return func() {}, nil
		}
		stop, addr, err := startDevGateway(ctx, n.GRPCAddr(), *gwAddr, cfg.Logger)
		if err != nil {
			return nil, err
		}
		printDevHelp(stdout, n, cfg.DataDir, addr)
		return stop, nil
	})
}

// startDevGateway serves an echo upstream on a free loopback port and a
// gateway in front of it on listen, checking with the node at grpcAddr.
func startDevGateway(ctx context.Context, grpcAddr, listen string, logger *slog.Logger) (stop func(), addr string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("dev echo upstream: %w", err)
	}
	echo := &http.Server{Handler: http.HandlerFunc(echoHandler), ReadHeaderTimeout: 10 * time.Second}
	go echo.Serve(ln)
	cfg := client.DefaultConfig()
	cfg.Cluster, cfg.GatewayID, cfg.Logger = []string{grpcAddr}, "dev-gateway", logger
	cfg.Registry = prometheus.NewRegistry()
	gw, err := startGateway(ctx, cfg, &url.URL{Scheme: "http", Host: ln.Addr().String()}, listen, true)
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

func printDevHelp(w io.Writer, n *node.Node, dataDir, gateway string) {
	h := n.HTTPAddr()
	fmt.Fprintf(w, `weir dev: one node with the example rules is up.
  HTTP  http://%[1]s    gRPC %[2]s    data %[3]s

Try:
  weir rules list --addr %[1]s
  weir check --addr %[1]s --key ip:203.0.113.7 --rule login.ip   # 5 per minute
  curl -s -XPOST http://%[1]s/v1/limits/check -d '{"key":"apikey:ak_1","rule":"orders.write"}'
  curl -s http://%[1]s/v1/limits/apikey:ak_1
  curl -s http://%[1]s/metrics | grep weir_
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
