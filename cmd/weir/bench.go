package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/weirlimit/weir/bench"
)

const benchSynopsis = "weir bench [--scenario NAME] (--spawn N | --cluster ADDR,...) [--spawn-redis | --redis ADDR] [--callers W] [--gateways G] [--duration D] [--count N]"

// runBench runs one scenario against Weir and/or Redis, back to back with
// the same callers, keys and bounds, and prints one JSON line per run and
// a table with the Weir/Redis ratios.
func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	scenario := fs.String("scenario", "steady", "preset: "+strings.Join(bench.Presets(), ", "))
	cluster := fs.String("cluster", "", "comma-separated gRPC addresses of a running Weir cluster")
	spawn := fs.Int("spawn", 0, "start N `weir node` processes on loopback for the run")
	redisAddr := fs.String("redis", "", "address of a redis-server to compare against")
	spawnRedis := fs.Bool("spawn-redis", false, "start a redis-server on loopback to compare against")
	callers := fs.Int("callers", 64, "concurrent callers (W)")
	gateways := fs.Int("gateways", 4, "simulated gateways (G); caller w uses gateway w%G")
	keys := fs.Int("keys", 0, "number of keys (0: the scenario's)")
	dist := fs.String("dist", "", "key distribution: uniform or zipf (empty: the scenario's)")
	cost := fs.Int64("cost", 0, "tokens per check (0: the scenario's)")
	duration := fs.Duration("duration", 10*time.Second, "bound on each run's duration (0: none)")
	count := fs.Int64("count", 0, "bound on each run's checks (0: none)")
	timeout := fs.Duration("timeout", 5*time.Second, "bound on one check")
	inflight := fs.Int("inflight", bench.DefaultWeirOptions().Inflight, "weir: Check RPCs in flight per gateway and node")
	maxBatch := fs.Int("max-batch", bench.DefaultWeirOptions().MaxBatch, "weir: most items per Check RPC")
	nodeLog := fs.String("node-log", "", "file for spawned processes' output (default: discarded)")
	if err := parseFlags(fs, args, benchSynopsis); err != nil {
		return err
	}
	sc, err := bench.Preset(*scenario)
	if err != nil {
		return &usageError{msg: err.Error(), synopsis: benchSynopsis}
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
		return &usageError{msg: fmt.Sprintf("--dist %q: use uniform or zipf", *dist), synopsis: benchSynopsis}
	}
	if *cost > 0 {
		sc.Cost = *cost
	}
	if err := sc.Validate(); err != nil {
		return &usageError{msg: err.Error(), synopsis: benchSynopsis}
	}
	useWeir := *cluster != "" || *spawn > 0
	useRedis := *redisAddr != "" || *spawnRedis
	if !useWeir && !useRedis {
		return &usageError{msg: "no target: give --spawn N or --cluster, and/or --spawn-redis or --redis", synopsis: benchSynopsis}
	}
	if *cluster != "" && *spawn > 0 || *redisAddr != "" && *spawnRedis {
		return &usageError{msg: "give either an address or a spawn flag per target, not both", synopsis: benchSynopsis}
	}
	if sc.Event != bench.EventNone && useWeir && *spawn == 0 {
		return &usageError{msg: fmt.Sprintf("scenario %s kills or adds nodes: it needs --spawn", sc.Name), synopsis: benchSynopsis}
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
	prefix := fmt.Sprintf("b%x:", time.Now().UnixNano())
	var results []*bench.Result

	if useWeir {
		r, err := benchWeir(ctx, cfg, sc, prefix, *cluster, *spawn, *inflight, *maxBatch, logw)
		if err != nil {
			return err
		}
		results = append(results, r)
		if err := bench.WriteJSON(os.Stdout, r); err != nil {
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
		c := cfg
		c.Target, c.KeyPrefix = "redis", prefix
		per := (*callers + *gateways - 1) / *gateways
		r, err := bench.Run(ctx, c, sc, bench.RedisFactory(addr, sc.Rules, per))
		if err != nil {
			return err
		}
		results = append(results, r)
		if err := bench.WriteJSON(os.Stdout, r); err != nil {
			return err
		}
	}
	return bench.WriteTable(os.Stdout, results)
}

func benchWeir(ctx context.Context, cfg bench.Config, sc bench.Scenario, prefix, cluster string, spawn, inflight, maxBatch int, logw io.Writer) (*bench.Result, error) {
	var addrs []string
	var sp *bench.Spawned
	if spawn > 0 {
		bin, err := os.Executable()
		if err != nil {
			return nil, err
		}
		sp, err = bench.SpawnCluster(ctx, bin, spawn, logw)
		if err != nil {
			return nil, err
		}
		defer sp.Close()
		addrs = sp.GRPCAddrs()
		if err := bench.ApplyRules(ctx, sp.Nodes()[0].HTTP, sc.RulesYAML(), sc.RuleIDs(), addrs); err != nil {
			return nil, err
		}
	} else {
		for _, a := range strings.Split(cluster, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
	}
	opts := bench.DefaultWeirOptions()
	opts.Inflight, opts.MaxBatch = inflight, maxBatch
	wc, err := bench.NewWeirCluster(ctx, addrs, opts)
	if err != nil {
		return nil, err
	}
	defer wc.Close()
	cfg.Target, cfg.KeyPrefix = "weir", prefix
	switch sc.Event {
	case bench.EventKill:
		cfg.Midway = func(context.Context) error {
			victim := wc.Owner("apikey:" + prefix + "0")
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
	return bench.Run(ctx, cfg, sc, wc.Factory())
}
