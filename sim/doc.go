// Package sim assembles the parts of N Weir nodes in one process, over
// in-memory transports and one deterministic clock (schedtest.Sim): the
// seed of the whole-cluster simulator (issue 26). It is imported only by
// tests and, later, the simulator's command; it imports no gRPC,
// memberlist or Raft package (test/deps_test.go).
//
// # What a node is here
//
// Per node, the parts production runs (node is their shell there):
//
//   - a shard engine in Inline mode (decides on the caller's goroutine,
//     sweeps on Step) that is the hand-off's Counters (Export, Import, Drop);
//   - an Inline replication.Replicator (ships on Flush) whose Transport
//     applies the states to the destination node's replication.Store;
//   - an Inline replication.Handoff (each event applied on the caller's
//     goroutine, ticked by Step) whose Peers call the holder's Serve in
//     memory;
//   - a clusterview.Book fed by the cluster's membership (Report), and a
//     clusterview.Policy that turns the live members into a ring change
//     for the hand-off, published only once the hand-off took it;
//   - a replication.Router per check: decide here (pinned, Handoff.Pin),
//     forward to another sim node in memory (counted in Result.Hops),
//     wait for the pull (queued work is run until the partition is
//     ready), or unavailable;
//   - a graceful leave stepped by clusterview.Leave.
//
// The cluster is membership: Join reports a new member to every book and
// every node's book of it; Leave marks the member leaving, lets the new
// owners pull, then reports it left. Each ring change is applied node by
// node, in id order (Refresh), so checks between two nodes' refreshes see
// rings that disagree, as they do while gossip spreads.
//
// # Time, goroutines and order
//
// One goroutine drives the simulation (the test's): it calls Check, Join,
// Leave, Step and Settle, and runs the queued work (pulls, resyncs,
// replication sends) itself, in the order it was queued. No part has a
// goroutine, a loop or a ticker of its own: the engines, hand-offs and
// replicators are Inline, every one on the cluster's one schedtest.Sim.
// The clock moves only in Step, by Tick; then each hand-off ticks, the
// queued work runs, and node by node the engine sweeps and the
// replicator flushes (its sends run before the next node flushes). So
// everything is decided on the driver's goroutine; the same seed and the
// same calls give the same decisions (Cluster.Trace).
//
// # The World: whole-cluster runs from a seed
//
// Run (world.go, loop.go, fault.go, oracle.go, run.go) builds on the same
// parts: N hosts (3 to 64) on one event loop, a heap of (simulated time,
// sequence) events on the driver's goroutine. The hand-off's pulls and
// resyncs and the replicator's sends are coroutines (iter.Pull) that the
// loop resumes; their RPCs are messages with delays, loss, duplication
// and deadlines. Gossip (detection, refutation, merge, a join's push/pull),
// Raft leadership (a majority side, an election delay) and the quorum
// watch's samples are modelled; faults are data drawn up front from their
// own stream (Generate) or read from sim/testdata (ParseCase). The oracle
// judges each run against docs/design.md's "Simulator bounds" (one
// function per row); Shrink removes faults from a failing schedule. make
// sim runs the searches (search_test.go).
//
// Cluster (the older driver above) stays for its step-by-step tests: no
// faults, Raft leadership always known, PeersAnswer always true.
package sim
