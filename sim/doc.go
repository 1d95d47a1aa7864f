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
//   - a replication.Replicator whose Transport applies the states to the
//     destination node's replication.Store;
//   - a replication.Handoff whose Peers call the holder's Serve in memory;
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
// replication sends) itself, in the order it was queued. The clock moves
// only in Step, by the hand-off's tick interval. Two loops still need a
// goroutine of their own, because they are select loops over channels:
// each node's Handoff.Run and Replicator.Run (started through the real
// seam, joined by Close). The driver keeps them in step: after each
// Advance it waits until every hand-off took its tick (its Routes
// changed) and ran the tick's effects (an empty Serve as a barrier), and
// each replicator has its own schedtest.Sim, advanced one Tick only when
// it has something to ship and then drained until nothing is pending,
// node by node, so its flushes fall at fixed points and its sends never
// interleave with the hand-offs' work. Everything else is decided on the
// driver's goroutine; the same seed and the same calls give the same
// decisions (Cluster.Trace).
//
// # Not covered yet
//
// Rules, overrides and groups (an Item carries its own limit), the
// check's batching per destination, failures (no dropped links, kills or
// splits: PeersAnswer is always true), Raft leadership (always known:
// no split bases), the quorum watch and the join's backoff.
package sim
