// Package node is the composition root of one Weir process: it wires gossip
// membership (memberlist), the ring (package ring), the decision shards
// (node/shard), counter replication and the partition hand-off (package
// replication), the rules Raft group (package rulesraft) and the edges
// (node/api for the public HTTP and gRPC APIs, peer.go for node-to-node
// gRPC). It owns no protocol of its own and holds no algorithm logic; what
// it does itself is routing a check to the node that decides it.
//
// Files:
//   - node.go: construction, Start, gRPC health
//     and reflection, Leave, Close.
//   - members.go: builds node/membership's Cluster (gossip, the member
//     book, the cluster view and its loop, Raft bootstrap and voters, the
//     quorum watch, join, rejoin and leave) and adapts the node's other
//     parts to the small interfaces it defines.
//   - check.go: routing checks; the remote parts go through node/forward.
//   - peer.go: wires node/forward (forwarders, peer connections) and
//     node/peer (the Peer gRPC service, replication transport, hand-off
//     puller) with their adapters.
//   - security.go: wires the security part (node/security: TLS, roles,
//     admission of members, the gossip keyring and node proofs, the
//     identity guard) and the keyring HTTP edge (node/keyringapi), with
//     securityMembers, the part's view of this node's membership.
//   - limits.go: GetLimits (the rules of a key's type, peeked).
//   - ops_wire.go: builds node/ops (the operators' view: check metrics,
//     sampled events, hot keys, per-rule rates, gateway reports, permits
//     in use, and its edge node/opsapi) and adapts the node's rule view
//     and members to ops' interfaces.
//
// The core speaks domain types only: Check decides []limit.Item into
// []limit.Result and implements node/api's Backend. Protobuf is converted
// at the wire edges, the node-to-node ones included: the peer server
// (node/peer: Forward, ForwardStream) converts and validates forwarded items
// (limit.DecideValid) and the forwarder converts a batch just before it
// is sent; both convert a batch into one value slice, not per-item
// pointers. Errors carry limit kinds (ErrClosed is limit.ErrClosed, no ring
// yet is limit.ErrUnavailable), which api.GRPCError and api.HTTPStatus map
// to codes.
//
// Goroutines and what they own:
//   - node/membership's loops (Cluster.Run): the cluster view, the join
//     retries, the rejoin of lost members and the quorum watch
//     (node/membership/doc.go).
//   - replication.Handoff's loop: the partition table (ready, pending,
//     moved, released), the pulls and resyncs. The check path reads its
//     published Routes and pins the partitions it decides locally.
//   - shards (node/shard): the counters, each shard's behind its lock; the
//     check path decides at once when the shard is free and queues for
//     the holder's next batch when it is busy.
//   - node/forward's Table: one forwarder per destination, coalescing
//     items bound for that member into few requests on one pipelined
//     stream; one receiver goroutine per open stream, joined by the
//     table's Close. Pruned when the member leaves.
//   - the replicator loop: changed counters shipped to replicas.
//   - serveHealth: sets grpc.health.v1 to SERVING once the node is first
//     ready, then ends; Leave turns it NOT_SERVING for good.
//   - ops.Run (node/ops): steps the per-rule rates every 2 s and rotates
//     the hot-key windows; node/ops documents its locks.
package node
