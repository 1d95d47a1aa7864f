// Package node wires one Weir process together: gossip membership
// (memberlist), the ring (package ring), the decision shards (node/shard),
// counter replication and hand-off (package replication), the rules Raft
// group (package rulesraft) and the servers (node/api for the public HTTP and
// gRPC APIs, peer.go for node-to-node gRPC). It holds no algorithm logic.
//
// The core speaks domain types only: Check decides []limit.Item into
// []limit.Result and implements node/api's Backend. Protobuf is converted
// at the wire edges, the node-to-node ones included: the peer server
// (Forward, ForwardStream) converts and validates forwarded items
// (limit.DecideValid) and the forwarder converts a batch just before it
// is sent; both convert a batch into one value slice, not per-item
// pointers. Errors carry limit kinds (ErrClosed is limit.ErrClosed, no ring
// yet is limit.ErrUnavailable), which api.GRPCError and api.HTTPStatus map
// to codes; grpcErr is api.GRPCError.
//
// Goroutines and what they own:
//   - clusterLoop: re-reads the member list on every gossip event (callbacks
//     only signal it) and each second, builds a new immutable ring and swaps
//     it (atomic clusterView), plans hand-off, bootstraps Raft once
//     --bootstrap-expect members are present, and on the Raft leader
//     reconciles voters with gossip membership.
//   - shard goroutines (node/shard) own the counters; the check path never
//     locks.
//   - one forwarder loop per destination coalesces items bound for that
//     owner into few Forward RPCs (flushed when a send slot frees, never
//     after a fixed sleep).
//   - the replicator loop ships changed counters to replicas.
//   - pullPartitions (one per ring change that gains partitions) fetches
//     their state from the previous holder, then marks them ready.
//   - resyncReplicas (one per ring change that gives a partition this node
//     keeps a new replica) queues the partition's full state for it.
//   - reconnectLoop rejoins members gossip declared dead (every 2 s, for an
//     hour), so the two sides of a healed network split merge again.
//
// Partition states (partitions.go): ready (decide here), pending (this node
// owns it by the ring but waits for hand-off: items go to the previous
// holder), moved (handed off: items go to the new owner). A key held at 0
// remaining therefore stays limited through joins and graceful leaves; when
// an owner dies, its replica copies are promoted and at most the unshipped
// replication window (about ReplicationInterval) of decrements is lost.
package node
