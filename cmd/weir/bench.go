package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
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
	target := fs.StringSlice("target", []string{"sdk"}, "Weir targets: sdk (gateway SDK over gRPC), http (one JSON POST /v1/limits/check per check), rls (one Envoy ShouldRateLimit per check; with --cluster, apply bench.RLSRulesYAML's descriptor rules first)")
	redisAddr := fs.String("redis", "", "address of a redis-server to compare against")
	spawnRedis := fs.Bool("spawn-redis", false, "start a redis-server on loopback to compare against")
	callers := fs.Int("callers", 64, "concurrent callers (W)")
	gateways := fs.Int("gateways", 4, "simulated gateways (G); caller w uses gateway w%G")
	keys := fs.Int("keys", 0, "number of keys (0: the scenario's)")
	dist := fs.String("dist", "", "key distribution: uniform or zipf (empty: the scenario's)")
	cost := fs.Int64("cost", 0, "tokens per check (0: the scenario's)")
	duration := fs.Duration("duration", 10*time.Second, "bound on each run's duration (0: none)")
	count := fs.Int64("count", 0, "bound on each run's checks (0: none)")
	timeout := fs.Duration("timeout", 5*time.Second, "bound on one check; with --spawn also the rules' timeout (how long an SDK gateway waits for the owner before the fail mode, counted as an error, decides)")
	inflight := fs.Int("inflight", 0, "sdk: Check RPCs in flight per gateway and node (0: the SDK's default)")
	maxBatch := fs.Int("max-batch", 0, "sdk: most items per Check RPC (0: the SDK's default)")
	nodeLog := fs.String("node-log", "", "file for spawned processes' output (default: discarded)")
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
		if *spawn > 0 {
			sc.Timeout = *timeout
		}
		if err := sc.Validate(); err != nil {
			return usage("%v", err)
		}
		if *inflight < 0 || *maxBatch < 0 {
			return usage("--inflight and --max-batch must be ≥ 0")
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
		var targets []string
		if useWeir {
			for _, t := range trimAll(*target) {
				switch t {
				case "sdk", "http", "rls":
					targets = append(targets, t)
				default:
					return usage("--target %q: use sdk, http, rls or a list such as sdk,http,rls", t)
				}
				if t == "http" && len(sc.Rules) > 1 {
					return usage("--target http checks one rule per request; scenario %s checks %d rules as a group", sc.Name, len(sc.Rules))
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
			Seed: uint64(time.Now().UnixNano()),
		}
		run := fmt.Sprintf("b%x", time.Now().UnixNano())
		perGateway := (*callers + *gateways - 1) / *gateways
		var results []*bench.Result
		emit := func(r *bench.Result) error {
			results = append(results, r)
			return bench.WriteJSON(c.stdout, r)
		}

		for _, t := range targets {
			wb := weirBench{cfg: cfg, sc: sc, run: run, target: t, perGateway: perGateway,
				sdk: bench.SDKOptions{GatewayPrefix: run + "-" + t, InFlight: *inflight, MaxBatch: *maxBatch}, logw: logw}
			r, err := wb.do(ctx, seeds, *spawn)
			if err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
			if err := emit(r); err != nil {
				return err
			}
		}
		if useRedis {
			addr := *redisAddr
			if *spawnRedis {
				p, err := bench.SpawnRedis(ctx, logw)
				if err != nil {
					return err
				}
				defer p.Close()
				addr = p.Addr
			}
			rc := cfg
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

// weirBench is one run against Weir through one target (sdk or http).
type weirBench struct {
	cfg        bench.Config
	sc         bench.Scenario
	run        string
	target     string
	perGateway int
	sdk        bench.SDKOptions
	logw       io.Writer
}

// do runs against the cluster at seeds, or against a fresh cluster of
// spawn nodes (so one target's run leaves nothing to the next).
func (wb weirBench) do(ctx context.Context, seeds []string, spawn int) (*bench.Result, error) {
	var sp *bench.Spawned
	if spawn > 0 {
		bin, err := os.Executable()
		if err != nil {
			return nil, err
		}
		sp, err = bench.SpawnCluster(ctx, bin, spawn, wb.logw)
		if err != nil {
			return nil, err
		}
		defer sp.Close()
		seeds = sp.GRPCAddrs()
		yaml := wb.sc.RulesYAML()
		if wb.target == "rls" {
			yaml += wb.sc.RLSRulesYAML()
		}
		if err := bench.ApplyRules(ctx, sp.Nodes()[0].HTTP, yaml, wb.sc.RuleIDs(), seeds); err != nil {
			return nil, err
		}
	}
	cfg := wb.cfg
	cfg.KeyPrefix = wb.run + ":" + wb.target + ":"
	var factory bench.Factory
	switch wb.target {
	case "sdk":
		cfg.Target, cfg.Leases = bench.TargetSDK, true
		factory = bench.SDKFactory(ctx, seeds, wb.sdk)
	case "http":
		cfg.Target = bench.TargetHTTP
		cl, err := bench.ReadCluster(ctx, seeds)
		if err != nil {
			return nil, err
		}
		factory = bench.HTTPFactory(cl.HTTPAddrs(), wb.perGateway)
	case "rls":
		cfg.Target = bench.TargetRLS
		factory = bench.RLSFactory(seeds)
	}
	switch wb.sc.Event {
	case bench.EventKill:
		cfg.Midway = func(ctx context.Context) error {
			cl, err := bench.ReadCluster(ctx, seeds)
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
