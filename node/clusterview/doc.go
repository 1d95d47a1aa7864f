// Package clusterview holds the cluster decisions a node makes from what
// membership and Raft report, as parts that run without sockets, clocks or
// goroutines of their own (it imports no gRPC, memberlist or Raft package:
// test/deps_test.go):
//
//   - Book: the members membership reported (live, departed, lost, back
//     from a split, their last Raft addresses) and when to rejoin the lost.
//   - Policy: when the ring changes and what the hand-off is told, the
//     base to pull from included (a first ring, a quorum regained, the end
//     of a split this node spent on the side without a Raft quorum).
//   - Quorum: how long this node has known no Raft leader, and when it
//     comes back from being cut off.
//   - Leave and Join: the graceful leave (until the partitions are pulled
//     or no peer answers) and the join's backoff.
//   - Settle and Bootstrap: when a node started with others takes its
//     first ring (its member list settled), and whether it bootstraps the
//     Raft group or waits to be added to one already formed.
//
// Every call that needs the time takes it as an argument (Quorum counts
// the samples it is given, one per QuorumSample); what a part
// asks of the rest (departures, leader knowledge, the hand-off's routes, a
// probe of the peers) comes through the small interfaces defined here. The
// node is the shell: it feeds memberlist events and Raft observations in
// and carries out the decisions (swaps the ring, starts the hand-off,
// probes, rejoins addresses, stops leaving).
//
// Book is safe for concurrent use (membership callbacks write it, the
// node's loops read it). Policy, Settle, Quorum, Leave and Join are each owned by
// one goroutine: the cluster loop, the quorum watch, Leave's caller and
// the join loop.
package clusterview
