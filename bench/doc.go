// Package bench is the harness behind `weir bench`: it drives a rate
// limiter (a Target) with W concurrent callers spread over G simulated
// gateways, draws keys uniformly or Zipf-distributed, and reports
// throughput, latency percentiles, errors, the allowed share and, in
// accuracy mode, admitted-versus-ideal counts and per-gateway fairness.
//
// It owns: the load generator (Run), the percentile and accuracy maths
// (Percentile, Ideal, Deviation, Fairness), the key distributions
// (KeyGen), the scenario presets (Scenario), two targets — Weir over gRPC
// with a per-node coalescing sender (WeirCluster) and Redis with a Lua
// token bucket (RedisServer) — and the helpers that spawn local `weir node`
// and `redis-server` processes (SpawnCluster, SpawnRedis).
//
// Seam: a Target is one gateway's view of the limiter. A Factory makes one
// Target per simulated gateway, so the gateway SDK (package client) can be
// plugged in later by wrapping it in a Factory.
//
// Invariants and ownership:
//   - The maths (Percentile, Ideal, Deviation, Fairness, KeyGen) is pure:
//     no clock, no I/O; callers pass every input.
//   - Each caller goroutine of Run owns its latency slice and counters; Run
//     merges them after every caller has returned.
//   - A weir gateway owns one sender loop per node; that loop is the only
//     goroutine that drains the node's queue. RPCs run in goroutines bounded
//     by the sender's in-flight slots and are joined on Close.
//   - Nothing here is package-level mutable state: two benches may run in
//     one process.
package bench
