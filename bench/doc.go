// Package bench is the harness behind `weir bench`: it drives a rate
// limiter (a Target) with W concurrent callers spread over G simulated
// gateways, draws keys uniformly or Zipf-distributed, and reports
// throughput, latency percentiles, errors, the allowed share and, in
// accuracy mode, admitted-versus-ideal counts and per-gateway fairness.
//
// It owns: the load generator (Run), the percentile and accuracy maths
// (Percentile, Ideal, Deviation, Fairness), the key distributions
// (KeyGen), the scenario presets (Scenario), three targets — Weir through
// the gateway SDK, one client.Client per simulated gateway so batching,
// routing, leases and fail modes are the real ones (SDKFactory); Weir's
// HTTP check API, one JSON request per check (HTTPFactory); and Redis with
// a Lua token bucket (RedisFactory) — and the helpers that spawn local
// `weir node` and `redis-server` processes (SpawnCluster, SpawnRedis) and
// read a cluster's members once (ReadCluster: HTTP addresses, the owner of
// a key for the failover preset). It meters the processes it spawned
// (ProcCounters: CPU, read and write system calls, context switches summed
// over threads, per answered check; IdleCPU before the load), runs the
// protocol floors (ServeFloor, SpawnFloor: a fixed-reply gRPC rate limit
// service and net/http check API, the paths' lower bounds) and paces an
// open loop at a share of the capacity it measured first (RunPaced).
//
// Seam: a Target is one gateway's view of the limiter. A Factory makes one
// Target per simulated gateway. A check the SDK decided by a rule's fail
// mode, not by the cluster, is an error for the bench (ErrUndecided).
//
// Invariants and ownership:
//   - The maths (Percentile, Ideal, Deviation, Fairness, KeyGen) is pure:
//     no clock, no I/O; callers pass every input.
//   - Each caller goroutine of Run owns its latency slice and counters; Run
//     merges them after every caller has returned.
//   - Each simulated gateway owns its client (SDK or http.Client); Run
//     closes every gateway it made, and the SDK joins its goroutines on
//     Close.
//   - Nothing here is package-level mutable state: two benches may run in
//     one process.
package bench
