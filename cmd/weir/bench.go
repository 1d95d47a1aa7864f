package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirlimit/weir/bench"
)

// benchCmd runs one scenario against Weir (through the gateway SDK and/or
// the HTTP check API) and/or Redis, back to back with the same callers,
// keys and bounds, and prints one JSON line per run and a table with each
// target's ratios to Redis.
func (c *cli) benchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench [--scenario NAME] (--spawn N | --cluster ADDR,...) [--spawn-redis | --redis ADDR]",
		Args: noArgs, GroupID: "run", Short: "Measure checks per second and latency"}
	fs := cmd.Flags()
	scenario := fs.String("scenario", "steady", "preset: "+strings.Join(bench.Presets(), ", "))
	cluster := fs.StringSlice("cluster", nil, "gRPC addresses of a running Weir cluster (comma-separated or repeated)")
	spawn := fs.Int("spawn", 0, "start N `weir node` processes on loopback for each Weir target's run")
	target := fs.StringSlice("target", []string{"sdk"}, "Weir targets: sdk (gateway SDK over gRPC), http (one JSON POST /v1/limits/check per check), rls (one Envoy ShouldRateLimit per check; with --cluster, apply bench.RLSRulesYAML's descriptor rules first), gateway (HTTP requests through weir gateway processes to an upstream, one check each; needs --spawn), proxy (the same on a route no rule matches), plainproxy (the same requests through plain Go httputil.ReverseProxy processes, no cluster: the baseline of gateway and proxy)")
	redisAddr := fs.String("redis", "", "address of a redis-server to compare against")
	nodeProcs := fs.Int("node-procs", 0, "with --spawn: each node's GOMAXPROCS; 0: this machine's cores ÷ nodes, at least 1 (the nodes share it with each other and the load); -1: Go's default, every core. A GOMAXPROCS in the environment wins")
	spawnRedis := fs.Bool("spawn-redis", false, "start a redis-server on loopback to compare against")
	callers := fs.Int("callers", 64, "concurrent callers (W)")
	gateways := fs.Int("gateways", 4, "simulated gateways (G); caller w uses gateway w%G")
	keys := fs.Int("keys", 0, "number of keys (0: the scenario's)")
	dist := fs.String("dist", "", "key distribution: uniform or zipf (empty: the scenario's)")
	cost := fs.Int64("cost", 0, "tokens per check (0: the scenario's)")
	lease := fs.String("lease", "", "every rule's lease: auto, off or a count N ≥ 1 (empty: the scenario's), e.g. to compare a preset with and without automatic leases")
	rate := fs.Float64("rate", 0, "open loop: schedule N checks per second in all at fixed intervals and count each latency from its scheduled time (no coordinated omission); 0: closed loop, each caller sends when answered")
	duration := fs.Duration("duration", 10*time.Second, "bound on each run's duration (0: none)")
	count := fs.Int64("count", 0, "bound on each run's checks (0: none)")
	timeout := fs.Duration("timeout", 5*time.Second, "bound on one check; with --spawn also the rules' timeout (how long an SDK gateway waits for the owner before the fail mode, counted as an error, decides)")
	inflight := fs.Int("inflight", 0, "sdk: Check RPCs in flight per gateway and node (0: the SDK's default)")
	maxBatch := fs.Int("max-batch", 0, "sdk: most items per Check RPC (0: the SDK's default)")
	linger := fs.Duration("linger", 0, "sdk: longest wait for the callers a request answered to ask again before the next one is sent (0: the SDK's default; negative: none)")
	nodeLog := fs.String("node-log", "", "file for spawned processes' output (default: discarded)")
	tlsMode := fs.String("tls", "off", "with --spawn: off, on (mutual TLS everywhere; targets labelled +tls) or both (each target without, then with TLS)")
	regionLatency := fs.Duration("region-latency", 0, "scenario regions: added one-way latency between regions (a loopback proxy on every region link), e.g. 40ms")
	settle := fs.Duration("settle", 0, "accuracy scenarios: also report the steady state, the checks sent from this long after the start to the end of the run against rate × that window (0: none; scenario regions: 3s)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this load generator (its SDK gateways and callers) to `file`")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer pprof.StopCPUProfile()
		}
		usage := func(format string, a ...any) error { return usageErr(cmd, format, a...) }
		sc, err := bench.Preset(*scenario)
		if err != nil {
			return usage("%v", err)
		}
		if *keys > 0 {
			sc.Keys = *keys
		}
		switch *dist {
		case "":
		case "uniform":
			sc.Zipf = false
		case "zipf":
			sc.Zipf = true
		default:
			return usage("--dist %q: use uniform or zipf", *dist)
		}
		if *cost > 0 {
			sc.Cost = *cost
		}
		if *lease != "" {
			n, auto := int64(0), *lease == "auto"
			if !auto && *lease != "off" {
				if n, err = strconv.ParseInt(*lease, 10, 64); err != nil || n < 1 {
					return usage("--lease %q: want auto, off or a count ≥ 1", *lease)
				}
			}
			for i := range sc.Rules {
				sc.Rules[i].Lease, sc.Rules[i].AutoLease = n, auto
			}
		}
		if *spawn > 0 {
			sc.Timeout = *timeout
		}
		if err := sc.Validate(); err != nil {
			return usage("%v", err)
		}
		if *rate < 0 {
			return usage("--rate %g: must be ≥ 0 (0: closed loop)", *rate)
		}
		if *regionLatency < 0 || *regionLatency > 0 && len(sc.Regions) == 0 {
			return usage("--region-latency %v: a duration ≥ 0, for scenario regions only", *regionLatency)
		}
		if *inflight < 0 || *maxBatch < 0 {
			return usage("--inflight and --max-batch must be ≥ 0")
		}
		if *nodeProcs < -1 {
			return usage("--node-procs %d: a count ≥ 1, 0 (cores ÷ nodes) or -1 (Go's default)", *nodeProcs)
		}
		seeds := trimAll(*cluster)
		useWeir := len(seeds) > 0 || *spawn > 0
		useRedis := *redisAddr != "" || *spawnRedis
		if !useWeir && !useRedis {
			return usage("no target: give --spawn N or --cluster, and/or --spawn-redis or --redis")
		}
		if len(seeds) > 0 && *spawn > 0 || *redisAddr != "" && *spawnRedis {
			return usage("give either an address or a spawn flag per target, not both")
		}
		if sc.Event != bench.EventNone && useWeir && *spawn == 0 {
			return usage("scenario %s kills or adds nodes: it needs --spawn", sc.Name)
		}
		var tlsRuns []bool
		switch *tlsMode {
		case "off":
			tlsRuns = []bool{false}
		case "on":
			tlsRuns = []bool{true}
		case "both":
			tlsRuns = []bool{false, true}
		default:
			return usage("--tls %q: use off, on or both", *tlsMode)
		}
		if *tlsMode != "off" && *spawn == 0 {
			return usage("--tls %s needs --spawn (the bench makes the certificates)", *tlsMode)
		}
		var targets []string
		if useWeir {
			for _, t := range trimAll(*target) {
				switch t {
				case "sdk", "http", "rls", "gateway", "proxy", "plainproxy":
					targets = append(targets, t)
				default:
					return usage("--target %q: use sdk, http, rls, gateway, proxy or plainproxy (comma-separated)", t)
				}
				if t != "sdk" && len(sc.Rules) > 1 {
					return usage("--target %s checks one rule per request; scenario %s checks %d rules as a group", t, sc.Name, len(sc.Rules))
				}
				if (t == "gateway" || t == "proxy" || t == "plainproxy") && *spawn == 0 {
					return usage("--target %s starts weir gateway processes beside a cluster it spawns: it needs --spawn", t)
				}
			}
		}
		var logw io.Writer
		if *nodeLog != "" {
			f, err := os.Create(*nodeLog)
			if err != nil {
				return err
			}
			defer f.Close()
			logw = f
		}
		cfg := bench.Config{
			Callers: *callers, Gateways: *gateways, Duration: *duration, Count: *count, Timeout: *timeout,
			Seed: uint64(time.Now().UnixNano()), Rate: *rate, Settle: *settle,
		}
		if *settle < 0 || (*settle > 0 && *duration <= *settle) {
			return usage("--settle %v: a duration ≥ 0 and shorter than --duration", *settle)
		}
		run := fmt.Sprintf("b%x", time.Now().UnixNano())
		perGateway := (*callers + *gateways - 1) / *gateways
		var results []*bench.Result
		emit := func(r *bench.Result) error {
			results = append(results, r)
			return bench.WriteJSON(c.stdout, r)
		}

		if len(sc.Regions) > 0 {
			if *spawn == 0 || len(seeds) > 0 || useRedis || len(targets) != 1 {
				return usage("scenario %s spawns one cluster per region: give --spawn N (nodes per region), one target, and no --cluster or redis", sc.Name)
			}
			sdk := bench.SDKOptions{InFlight: *inflight, MaxBatch: *maxBatch, Linger: *linger}
			if err := benchRegions(ctx, cfg, sc, run, *spawn, targets[0], sdk, *regionLatency, logw, emit); err != nil {
				return err
			}
			return bench.WriteTable(c.stdout, results)
		}
		for _, t := range targets {
			for _, withTLS := range tlsRuns {
				wb := weirBench{cfg: cfg, sc: sc, run: run, target: t, perGateway: perGateway, tls: withTLS, procs: *nodeProcs,
					sdk: bench.SDKOptions{GatewayPrefix: run + "-" + t, InFlight: *inflight, MaxBatch: *maxBatch, Linger: *linger}, logw: logw}
				r, err := wb.do(ctx, seeds, *spawn)
				if err != nil {
					return fmt.Errorf("%s: %w", t, err)
				}
				if err := emit(r); err != nil {
					return err
				}
			}
		}
		if useRedis {
			addr := *redisAddr
			rc := cfg
			if *spawnRedis {
				p, err := bench.SpawnRedis(ctx, logw)
				if err != nil {
					return err
				}
				defer p.Close()
				addr = p.Addr
				rc.Procs = bench.Procs{"redis-server": {p.PID()}}
			}
			rc.Target, rc.KeyPrefix = bench.TargetRedis, run+":"
			r, err := bench.Run(ctx, rc, sc, bench.RedisFactory(addr, sc.Rules, perGateway))
			if err != nil {
				return err
			}
			if err := emit(r); err != nil {
				return err
			}
		}
		return bench.WriteTable(c.stdout, results)
	}
	return cmd
}

// nodeGOMAXPROCS is --node-procs for n spawned nodes: 0 shares the cores
// among them, -1 (or a GOMAXPROCS in the environment) leaves Go's choice.
func nodeGOMAXPROCS(flag, n int) int {
	switch {
	case flag < 0 || os.Getenv("GOMAXPROCS") != "":
		return 0
	case flag > 0:
		return flag
	}
	return max(1, runtime.NumCPU()/max(n, 1))
}

// weirBench is one run against Weir through one target (sdk or http).
type weirBench struct {
	cfg        bench.Config
	sc         bench.Scenario
	run        string
	target     string
	perGateway int
	sdk        bench.SDKOptions
	logw       io.Writer
	tls        bool // spawn the cluster with mutual TLS
	procs      int  // spawned nodes' GOMAXPROCS (0: the environment's)
}

// do runs against the cluster at seeds, or against a fresh cluster of
// spawn nodes (so one target's run leaves nothing to the next).
func (wb weirBench) do(ctx context.Context, seeds []string, spawn int) (*bench.Result, error) {
	var sp *bench.Spawned
	if wb.target == "plainproxy" {
		spawn = 0 // no check: no cluster
	}
	if spawn > 0 {
		bin, err := os.Executable()
		if err != nil {
			return nil, err
		}
		sp, err = bench.SpawnCluster(ctx, bin, spawn, wb.logw, bench.SpawnOptions{TLS: wb.tls, Procs: nodeGOMAXPROCS(wb.procs, spawn)})
		if err != nil {
			return nil, err
		}
		defer sp.Close()
		seeds = sp.GRPCAddrs()
		wb.cfg.Procs = bench.Procs{"nodes": sp.PIDs()}
		yaml := wb.sc.RulesYAML()
		if wb.target == "rls" {
			yaml += wb.sc.RLSRulesYAML()
		}
		if err := bench.ApplyRules(ctx, sp.Nodes()[0].HTTP, yaml, wb.sc.RuleIDs(), seeds, sp.AdminTLS, sp.GatewayTLS); err != nil {
			return nil, err
		}
	}
	var gwTLS *tls.Config
	if sp != nil {
		gwTLS = sp.GatewayTLS
	}
	label := ""
	if gwTLS != nil {
		label = "+tls"
	}
	wb.sdk.TLS = gwTLS
	cfg := wb.cfg
	cfg.KeyPrefix = wb.run + ":" + wb.target + ":"
	var factory bench.Factory
	switch wb.target {
	case "sdk":
		cfg.Target, cfg.Leases = bench.TargetSDK+label, true
		factory = bench.SDKFactory(ctx, seeds, wb.sdk)
	case "http":
		cfg.Target = bench.TargetHTTP + label
		cl, err := bench.ReadCluster(ctx, seeds, gwTLS)
		if err != nil {
			return nil, err
		}
		factory = bench.HTTPFactory(cl.HTTPAddrs(), wb.perGateway, gwTLS)
	case "gateway", "proxy", "plainproxy":
		cfg.Target = map[string]string{"gateway": bench.TargetGateway, "proxy": bench.TargetProxy, "plainproxy": bench.TargetPlainProxy}[wb.target]
		up, err := bench.StartUpstream()
		if err != nil {
			return nil, err
		}
		defer up.Close()
		bin, err := os.Executable()
		if err != nil {
			return nil, err
		}
		factory = bench.GatewayFactory(ctx, bench.GatewayOptions{Bin: bin, Seeds: seeds, Upstream: up.Addr,
			Prefix: wb.run + "-" + wb.target, Conns: wb.perGateway, Check: wb.target == "gateway", Plain: wb.target == "plainproxy", Log: wb.logw})
	case "rls":
		cfg.Target = bench.TargetRLS
		factory = bench.RLSFactory(seeds)
	}
	switch wb.sc.Event {
	case bench.EventKill:
		cfg.Midway = func(ctx context.Context) error {
			cl, err := bench.ReadCluster(ctx, seeds, gwTLS)
			if err != nil {
				return err
			}
			victim := cl.Owner("apikey:" + cfg.KeyPrefix + "0")
			fmt.Fprintf(os.Stderr, "bench: killing %s (owner of the first key) half-way\n", victim)
			return sp.Kill(victim)
		}
	case bench.EventAdd:
		cfg.Midway = func(context.Context) error {
			n, err := sp.Add()
			if err == nil {
				fmt.Fprintf(os.Stderr, "bench: added node %s half-way\n", n.ID)
			}
			return err
		}
	}
	return bench.Run(ctx, cfg, wb.sc, factory)
}
