package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weirlimit/weir/bench"
)

// benchOptions are `weir bench`'s flags.
type benchOptions struct {
	scenario, dist, lease, rate, tlsMode string
	cluster, targets                     []string
	spawn, nodeProcs                     int
	redisAddr                            string
	spawnRedis                           bool
	callers, gateways, keys              int
	cost, count                          int64
	duration, timeout, linger            time.Duration
	inflight, maxBatch                   int
	nodeLog, cpuProfile, nodeBin         string
	regionLatency, settle                time.Duration
	idle, capacity                       time.Duration
}

func (o *benchOptions) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.scenario, "scenario", "steady", "preset: "+strings.Join(bench.Presets(), ", "))
	fs.StringSliceVar(&o.cluster, "cluster", nil, "gRPC addresses of a running Weir cluster (comma-separated or repeated)")
	fs.IntVar(&o.spawn, "spawn", 0, "start N `weir node` processes on loopback for each Weir target's run")
	fs.StringSliceVar(&o.targets, "target", []string{"sdk"}, "Weir targets: "+targetsHelp())
	fs.StringVar(&o.redisAddr, "redis", "", "address of a redis-server to compare against")
	fs.IntVar(&o.nodeProcs, "node-procs", 0, "with --spawn: each node's GOMAXPROCS; 0: this machine's cores ÷ nodes, at least 1 (the nodes share it with each other and the load); -1: Go's default, every core. A GOMAXPROCS in the environment wins")
	fs.BoolVar(&o.spawnRedis, "spawn-redis", false, "start a redis-server on loopback to compare against")
	fs.IntVar(&o.callers, "callers", 64, "concurrent callers (W)")
	fs.IntVar(&o.gateways, "gateways", 4, "simulated gateways (G); caller w uses gateway w%G")
	fs.IntVar(&o.keys, "keys", 0, "number of keys (0: the scenario's)")
	fs.StringVar(&o.dist, "dist", "", "key distribution: uniform or zipf (empty: the scenario's)")
	fs.Int64Var(&o.cost, "cost", 0, "tokens per check (0: the scenario's)")
	fs.StringVar(&o.lease, "lease", "", "every rule's lease: auto, off or a count N ≥ 1 (empty: the scenario's), e.g. to compare a preset with and without automatic leases")
	fs.StringVar(&o.rate, "rate", "0", "open loop: schedule N checks per second in all at fixed intervals and count each latency from its scheduled time (no coordinated omission); P% (e.g. 30%): per target, first a closed-loop run of --capacity-duration, then the open loop at P% of the checks/s it reached (a floor target at the rate of its path's run, when that ran before it); 0: closed loop, each caller sends when answered")
	fs.DurationVar(&o.capacity, "capacity-duration", 3*time.Second, "with --rate P%: each target's closed-loop run that measures its capacity")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "bound on each run's duration (0: none)")
	fs.Int64Var(&o.count, "count", 0, "bound on each run's checks (0: none)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "bound on one check; with --spawn also the rules' timeout (how long an SDK gateway waits for the owner before the fail mode, counted as an error, decides)")
	fs.IntVar(&o.inflight, "inflight", 0, "sdk: Check RPCs in flight per gateway and node (0: the SDK's default)")
	fs.IntVar(&o.maxBatch, "max-batch", 0, "sdk: most items per Check RPC (0: the SDK's default)")
	fs.DurationVar(&o.linger, "linger", 0, "sdk: longest wait for the callers a request answered to ask again before the next one is sent (0: the SDK's default; negative: none)")
	fs.StringVar(&o.nodeLog, "node-log", "", "file for spawned processes' output (default: discarded)")
	fs.StringVar(&o.tlsMode, "tls", "off", "with --spawn: off, on (mutual TLS everywhere; targets labelled +tls) or both (each target without, then with TLS)")
	fs.DurationVar(&o.regionLatency, "region-latency", 0, "scenario regions: added one-way latency between regions (a loopback proxy on every region link), e.g. 40ms")
	fs.DurationVar(&o.settle, "settle", 0, "accuracy scenarios: also report the steady state, the checks sent from this long after the start to the end of the run against rate × that window (0: none; scenario regions: 3s)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this load generator (its SDK gateways and callers) to `file`")
	fs.DurationVar(&o.idle, "idle", 2*time.Second, "sample each spawned server's CPU for this long once it is ready, before any load, and print it per process as % of a core (0: skip)")
	fs.StringVar(&o.nodeBin, "node-bin", "", "with --spawn: the weir binary to run the nodes and gateway processes from (default: this one), e.g. a build of another commit to compare with in the same run")
}

// benchPlan is what the flags ask for, checked.
type benchPlan struct {
	sc                bench.Scenario
	seeds             []string
	targets           []string
	tlsRuns           []bool
	useWeir, useRedis bool
	rate, ratePct     float64 // --rate N or P%
}

// benchCmd runs one scenario against Weir (through the gateway SDK and/or
// the HTTP check API, …), protocol floors and/or Redis, back to back with
// the same callers, keys and bounds, and prints one JSON line per run and
// a table with each target's ratios to Redis and to its floor.
func (c *cli) benchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench [--scenario NAME] (--spawn N | --cluster ADDR,...) [--spawn-redis | --redis ADDR]",
		Args: noArgs, GroupID: "run", Short: "Measure checks per second and latency"}
	o := &benchOptions{}
	o.register(cmd.Flags())
	cmd.AddCommand(c.benchFloorCmd())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		p, err := o.plan()
		if err != nil {
			return usageErr(cmd, "%v", err)
		}
		return c.runBench(cmd.Context(), o, p)
	}
	return cmd
}

// preset is the scenario preset with the flags' changes, validated.
func (o *benchOptions) preset() (bench.Scenario, error) {
	sc, err := bench.Preset(o.scenario)
	if err != nil {
		return sc, err
	}
	if o.keys > 0 {
		sc.Keys = o.keys
	}
	switch o.dist {
	case "":
	case "uniform":
		sc.Zipf = false
	case "zipf":
		sc.Zipf = true
	default:
		return sc, fmt.Errorf("--dist %q: use uniform or zipf", o.dist)
	}
	if o.cost > 0 {
		sc.Cost = o.cost
	}
	if o.lease != "" {
		n, auto := int64(0), o.lease == "auto"
		if !auto && o.lease != "off" {
			if n, err = strconv.ParseInt(o.lease, 10, 64); err != nil || n < 1 {
				return sc, fmt.Errorf("--lease %q: want auto, off or a count ≥ 1", o.lease)
			}
		}
		for i := range sc.Rules {
			sc.Rules[i].Lease, sc.Rules[i].AutoLease = n, auto
		}
	}
	if o.spawn > 0 {
		sc.Timeout = o.timeout
	}
	return sc, sc.Validate()
}

// parseRate reads --rate: checks per second, or a percentage of capacity.
func parseRate(s string) (rate, pct float64, err error) {
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		pct, err = strconv.ParseFloat(p, 64)
		if err != nil || pct <= 0 || pct > 100 {
			return 0, 0, fmt.Errorf("--rate %q: a percentage of capacity must be in (0%%, 100%%]", s)
		}
		return 0, pct, nil
	}
	rate, err = strconv.ParseFloat(s, 64)
	if err != nil || rate < 0 {
		return 0, 0, fmt.Errorf("--rate %q: checks per second ≥ 0 (0: closed loop) or a percentage such as 30%%", s)
	}
	return rate, 0, nil
}

// plan checks the flags and says which runs they ask for.
func (o *benchOptions) plan() (*benchPlan, error) {
	sc, err := o.preset()
	if err != nil {
		return nil, err
	}
	p := &benchPlan{sc: sc, seeds: trimAll(o.cluster)}
	if p.rate, p.ratePct, err = parseRate(o.rate); err != nil {
		return nil, err
	}
	switch {
	case o.regionLatency < 0 || o.regionLatency > 0 && len(sc.Regions) == 0:
		return nil, fmt.Errorf("--region-latency %v: a duration ≥ 0, for scenario regions only", o.regionLatency)
	case o.inflight < 0 || o.maxBatch < 0:
		return nil, errors.New("--inflight and --max-batch must be ≥ 0")
	case o.nodeProcs < -1:
		return nil, fmt.Errorf("--node-procs %d: a count ≥ 1, 0 (cores ÷ nodes) or -1 (Go's default)", o.nodeProcs)
	case o.settle < 0 || (o.settle > 0 && o.duration <= o.settle):
		return nil, fmt.Errorf("--settle %v: a duration ≥ 0 and shorter than --duration", o.settle)
	case o.idle < 0 || o.capacity <= 0:
		return nil, errors.New("--idle must be ≥ 0 and --capacity-duration > 0")
	case p.ratePct > 0 && (sc.Event != bench.EventNone || len(sc.Regions) > 0):
		return nil, fmt.Errorf("--rate %s: scenario %s kills, adds or spans clusters; give a rate in checks per second", o.rate, sc.Name)
	}
	p.useWeir = len(p.seeds) > 0 || o.spawn > 0
	p.useRedis = o.redisAddr != "" || o.spawnRedis
	if len(p.seeds) > 0 && o.spawn > 0 || o.redisAddr != "" && o.spawnRedis {
		return nil, errors.New("give either an address or a spawn flag per target, not both")
	}
	if sc.Event != bench.EventNone && p.useWeir && o.spawn == 0 {
		return nil, fmt.Errorf("scenario %s kills or adds nodes: it needs --spawn", sc.Name)
	}
	switch o.tlsMode {
	case "off":
		p.tlsRuns = []bool{false}
	case "on":
		p.tlsRuns = []bool{true}
	case "both":
		p.tlsRuns = []bool{false, true}
	default:
		return nil, fmt.Errorf("--tls %q: use off, on or both", o.tlsMode)
	}
	if o.tlsMode != "off" && o.spawn == 0 {
		return nil, fmt.Errorf("--tls %s needs --spawn (the bench makes the certificates)", o.tlsMode)
	}
	if err := o.checkTargets(p); err != nil {
		return nil, err
	}
	if len(p.targets) == 0 && !p.useRedis {
		return nil, errors.New("no target: give --spawn N or --cluster, and/or --spawn-redis or --redis (or only floor targets)")
	}
	if len(sc.Regions) > 0 && (o.spawn == 0 || len(p.seeds) > 0 || p.useRedis || len(p.targets) != 1) {
		return nil, fmt.Errorf("scenario %s spawns one cluster per region: give --spawn N (nodes per region), one target, and no --cluster or redis", sc.Name)
	}
	return p, nil
}

// benchTarget is one --target: what it measures and what it needs.
type benchTarget struct {
	name  string
	label string // the results' target (bench.Target*)
	help  string
	// floor is the kind of floor server it runs against, without a
	// cluster (bench.FloorGRPC, bench.FloorHTTP; "": a cluster target), and
	// path the target whose open-loop rate it takes.
	floor, path string
	// proxy: HTTP requests through spawned gateway (or plain proxy)
	// processes; it needs --spawn.
	proxy bool
}

// benchTargets are the --target names, in the order the help lists them.
var benchTargets = []benchTarget{
	{name: "sdk", label: bench.TargetSDK, help: "gateway SDK over gRPC"},
	{name: "http", label: bench.TargetHTTP, help: "one JSON POST /v1/limits/check per check"},
	{name: "rls", label: bench.TargetRLS, help: "one Envoy ShouldRateLimit per check; with --cluster, apply bench.RLSRulesYAML's descriptor rules first"},
	{name: "gateway", label: bench.TargetGateway, proxy: true, help: "HTTP requests through weir gateway processes to an upstream, one check each; needs --spawn"},
	{name: "proxy", label: bench.TargetProxy, proxy: true, help: "the same on a route no rule matches"},
	{name: "plainproxy", label: bench.TargetPlainProxy, proxy: true, help: "the same requests through plain Go httputil.ReverseProxy processes, no cluster: the baseline of gateway and proxy"},
	{name: "floor-grpc", label: bench.TargetFloorGRPC, floor: bench.FloorGRPC, path: "rls", help: "the rls target's requests to a process answering each with a fixed reply, with a node's GOMAXPROCS: the gRPC floor"},
	{name: "floor-http", label: bench.TargetFloorHTTP, floor: bench.FloorHTTP, path: "http", help: "the http target's requests to a process answering each with a fixed reply: the HTTP floor"},
}

// lookupTarget is the --target named name.
func lookupTarget(name string) (benchTarget, bool) {
	i := slices.IndexFunc(benchTargets, func(t benchTarget) bool { return t.name == name })
	if i < 0 {
		return benchTarget{}, false
	}
	return benchTargets[i], true
}

// targetsHelp is --target's help: each name with what it measures.
func targetsHelp() string {
	parts := make([]string, len(benchTargets))
	for i, t := range benchTargets {
		parts[i] = t.name + " (" + t.help + ")"
	}
	return strings.Join(parts, ", ")
}

// targetNames lists the --target names for an error.
func targetNames() string {
	names := make([]string, len(benchTargets))
	for i, t := range benchTargets {
		names[i] = t.name
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// checkTargets fills p.targets from --target: without a cluster (no
// --spawn or --cluster) only the floor targets run.
func (o *benchOptions) checkTargets(p *benchPlan) error {
	for _, t := range trimAll(o.targets) {
		bt, ok := lookupTarget(t)
		if !ok {
			return fmt.Errorf("--target %q: use %s (comma-separated)", t, targetNames())
		}
		floor := bt.floor != ""
		if !p.useWeir && !floor {
			continue
		}
		if t != "sdk" && len(p.sc.Rules) > 1 {
			return fmt.Errorf("--target %s checks one rule per request; scenario %s checks %d rules as a group", t, p.sc.Name, len(p.sc.Rules))
		}
		if bt.proxy && o.spawn == 0 {
			return fmt.Errorf("--target %s starts weir gateway processes beside a cluster it spawns: it needs --spawn", t)
		}
		if floor && len(p.sc.Regions) > 0 {
			return fmt.Errorf("--target %s: not with scenario %s", t, p.sc.Name)
		}
		p.targets = append(p.targets, t)
	}
	return nil
}

// runBench runs the plan's targets one after the other and prints each
// result as it comes, then the table.
func (c *cli) runBench(ctx context.Context, o *benchOptions, p *benchPlan) error {
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var logw io.Writer
	if o.nodeLog != "" {
		f, err := os.Create(o.nodeLog)
		if err != nil {
			return err
		}
		defer f.Close()
		logw = f
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	nodeBin := self
	if o.nodeBin != "" {
		nodeBin = o.nodeBin
	}
	cfg := bench.Config{
		Callers: o.callers, Gateways: o.gateways, Duration: o.duration, Count: o.count, Timeout: o.timeout,
		Seed: uint64(time.Now().UnixNano()), Rate: p.rate, Settle: o.settle,
	}
	run := fmt.Sprintf("b%x", time.Now().UnixNano())
	var results []*bench.Result
	emit := func(rs ...*bench.Result) error {
		for _, r := range rs {
			results = append(results, r)
			if err := bench.WriteJSON(c.stdout, r); err != nil {
				return err
			}
		}
		return nil
	}
	if len(p.sc.Regions) > 0 {
		sdk := bench.SDKOptions{InFlight: o.inflight, MaxBatch: o.maxBatch, Linger: o.linger}
		if err := benchRegions(ctx, cfg, p.sc, run, o.spawn, p.targets[0], sdk, o.regionLatency, nodeBin, logw, func(r *bench.Result) error { return emit(r) }); err != nil {
			return err
		}
		return bench.WriteTable(c.stdout, results)
	}
	paced := map[string]float64{} // target → the open-loop rate its run used
	for _, t := range p.targets {
		tlsRuns := p.tlsRuns
		if bt, _ := lookupTarget(t); bt.floor != "" {
			tlsRuns = []bool{false} // a floor has no TLS of its own
		}
		for _, withTLS := range tlsRuns {
			wb := weirBench{cfg: cfg, sc: p.sc, run: run, target: t, perGateway: perGateway(o), tls: withTLS, procs: o.nodeProcs,
				sdk:  bench.SDKOptions{GatewayPrefix: run + "-" + t, InFlight: o.inflight, MaxBatch: o.maxBatch, Linger: o.linger},
				logw: logw, self: self, nodeBin: nodeBin, idle: o.idle, pace: o.pace(p, t, paced)}
			rs, err := wb.do(ctx, p.seeds, o.spawn)
			if err != nil {
				return fmt.Errorf("%s: %w", t, err)
			}
			if r := rs[len(rs)-1]; r.Rate > 0 {
				paced[t] = r.Rate
			}
			if err := emit(rs...); err != nil {
				return err
			}
		}
	}
	if p.useRedis {
		rs, err := o.redis(ctx, cfg, p, run, logw)
		if err != nil {
			return err
		}
		if err := emit(rs...); err != nil {
			return err
		}
	}
	return bench.WriteTable(c.stdout, results)
}

// perGateway is the callers one simulated gateway serves (its connections).
func perGateway(o *benchOptions) int { return (o.callers + o.gateways - 1) / o.gateways }

// pace is how target t's runs are paced: with --rate P%, at P% of its own
// capacity, or (a floor) at the rate its path ran at.
func (o *benchOptions) pace(p *benchPlan, t string, paced map[string]float64) bench.Pace {
	if p.ratePct == 0 {
		return bench.Pace{}
	}
	pc := bench.Pace{Pct: p.ratePct, Capacity: o.capacity}
	if bt, _ := lookupTarget(t); bt.path != "" && paced[bt.path] > 0 {
		pc.Rate, pc.RateFrom = paced[bt.path], bt.path
	}
	return pc
}

// redis runs the scenario against Redis + the Lua token bucket.
func (o *benchOptions) redis(ctx context.Context, cfg bench.Config, p *benchPlan, run string, logw io.Writer) ([]*bench.Result, error) {
	addr := o.redisAddr
	if o.spawnRedis {
		rp, err := bench.SpawnRedis(ctx, logw)
		if err != nil {
			return nil, err
		}
		defer rp.Close()
		addr = rp.Addr
		cfg.Procs = bench.Procs{"redis-server": {rp.PID()}}
	}
	cfg.Target, cfg.KeyPrefix = bench.TargetRedis, run+":"
	var idle []bench.Idle
	if o.idle > 0 && o.spawnRedis {
		var err error
		if idle, err = bench.IdleCPU(ctx, cfg.Procs["redis-server"], o.idle); err != nil {
			return nil, err
		}
	}
	rs, err := bench.RunPaced(ctx, cfg, p.sc, bench.RedisFactory(addr, p.sc.Rules, perGateway(o)), o.pace(p, "redis", nil))
	for _, r := range rs {
		r.Idle, r.IdleRole = idle, "redis-server"
	}
	return rs, err
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
