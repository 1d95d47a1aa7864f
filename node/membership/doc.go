// Package membership is one node's membership: gossip (memberlist), the
// member book its callbacks fill, the cluster view the check path reads
// and the loop that refreshes it, the Raft group's bootstrap and voters,
// the quorum watch, join, rejoin and the graceful leave. The decisions are
// node/clusterview's (Book, Policy, Quorum, Leave, Join); this package is
// their shell: it feeds them memberlist events and Raft observations and
// carries their answers out.
//
// What it needs of the node's other parts comes through small interfaces
// given to New (Deps): Prover and Admitter (security: member proofs and
// admission), Gateways, Handoff (the new ring goes to the hand-off before
// the check path sees it; a leave watches its routes), Restorer (durable
// counters hold the first ring back), RaftGroup (rulesraft.Store) and
// Dialer (a peer's connection, for health probes). None is called before
// Listen.
//
// Files:
//   - membership.go: Cluster, its configuration and dependencies, the
//     member reads (ReadMembers, RaftAddrOf, MemberFeatures, ...) and
//     Run, which starts and joins the loops.
//   - gossip.go: what a node gossips about itself (Meta), the memberlist
//     delegate (callbacks copy and signal, never block; the conflict
//     callback notes this node being gossiped at another address), its
//     log adapter and Listen.
//   - view.go: View (an immutable ring plus member set) and the cluster
//     loop: ring changes decided by clusterview.Policy, handed to the
//     hand-off before they are published.
//   - raftgroup.go: Raft bootstrap, voter reconciliation, why no leader
//     will come, and the quorum watch.
//   - join.go: join, its retries, the rejoin of members declared dead, and
//     the leave.
//   - addr.go: what the node advertises for each listener (Advertiser).
//
// Goroutines and what they own (all started by Run, joined before it
// returns):
//   - clusterLoop: the view (swapped atomically; readers load it once). It
//     re-reads the member list on every gossip event and each second, hands
//     a changed ring to the hand-off and waits until the hand-off took it,
//     then publishes the view (and calls Deps.Published); it bootstraps Raft
//     once BootstrapExpect members are present and, on the Raft leader,
//     reconciles voters with gossip membership.
//   - reconnectLoop: rejoins members gossip declared dead (every 2 s for 2
//     minutes, then every 30 s up to 15 minutes), so the two sides of a
//     healed network split merge again; re-announces this node while
//     gossip holds it at an old address.
//   - joinLoop (only while a Join has found no other member): retries the
//     join with backoff.
//   - watchQuorum: samples Raft's leader every 100 ms into a
//     clusterview.Quorum (leaderlessFor, regained are atomics the cluster
//     loop reads) and probes the peers when it lost the leader.
//
// The book has its own lock (memberlist callbacks write it, every loop
// reads it); memberlist's callbacks only copy into it and signal the
// cluster loop (Refresh, a non-blocking send).
package membership
