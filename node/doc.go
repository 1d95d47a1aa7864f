// Package node is the composition root of one Weir process: it wires gossip
// membership (memberlist), the ring (package ring), the decision shards
// (node/shard), counter replication and the partition hand-off (package
// replication), the rules Raft group (package rulesraft) and the edges
// (node/api for the public HTTP and gRPC APIs, peer.go for node-to-node
// gRPC). It owns no protocol of its own and holds no algorithm logic; what
// it does itself is routing a check to the node that decides it.
//
// Files:
//   - node.go: construction, Start (the join with backoff), gRPC health
//     and reflection, Leave, Close.
//   - addr.go: what the node advertises for each listener (Advertise, or
//     the bound address with an unspecified host replaced).
//   - gossip.go: what a node gossips about itself, the memberlist delegate
//     (callbacks copy and signal, never block; the conflict callback notes
//     this node being gossiped at another address) and its log adapter.
//   - membership.go: memberlist events into the member book
//     (node/clusterview.Book: the live, departed and lost members, the Raft
//     address gossip last gave for each, which Raft dials), and the rejoin
//     loop for members declared dead (which also re-announces this node
//     while gossip holds it at an old address).
//   - cluster.go: the cluster loop: ring changes decided by
//     clusterview.Policy, handed to the hand-off before they are published
//     to the check path.
//   - raftgroup.go: Raft bootstrap, voter reconciliation and the quorum
//     watch (clusterview.Quorum fed with Raft's leader every 100 ms).
//   - route.go: the check path (node/router) wired to the node's parts;
//     check.go, forward.go: forwarding checks.
//   - peer.go: the Peer gRPC service and the peer side of replication and
//     hand-off.
//   - security.go: mutual TLS (internal/tlsconf) on the gRPC, HTTP, peer
//     and Raft connections, the role policy (node/authz) in front of both
//     servers, and the admission of members: with TLS a member enters the
//     view (ring, forwarding, Raft) only after its gRPC port proved, with
//     a node certificate, that it is node/<its id>. Verifications run on
//     node goroutines (goFunc); admission.mu guards their maps.
//   - keys.go: the gossip keyring and who is a node (peerauth proofs on
//     Peer calls, Raft connections and gossip metadata; without a key,
//     gossip and Raft on loopback and Peer from loopback only), the HTTP
//     server's timeouts. keyring.go: key rotation across the live cluster
//     (weir keyring), one change at a time under keyringMu.
//   - ops.go, ops_wire.go: the operators' view (sampled events, hot keys,
//     per-rule rates, gateway reports) and node/opsapi's Source.
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
//   - clusterLoop: the cluster view (an immutable ring plus member set,
//     swapped atomically). It re-reads the member list on every gossip
//     event and each second, hands a changed ring to the hand-off and waits
//     until the hand-off took it, then publishes the view; it bootstraps
//     Raft once --bootstrap-expect members are present and, on the Raft
//     leader, reconciles voters with gossip membership.
//   - replication.Handoff's loop: the partition table (ready, pending,
//     moved, released), the pulls and resyncs. The check path reads its
//     published Routes and pins the partitions it decides locally.
//   - shards (node/shard): the counters, each shard's behind its lock; the
//     check path decides at once when the shard is free and queues for
//     the holder's next batch when it is busy.
//   - one forwarder per destination, coalescing items bound for that
//     member into few requests on one pipelined stream: the check that
//     finds no write in progress writes, never after a fixed sleep; one
//     receiver goroutine per open stream answers them. Pruned when the
//     member leaves.
//   - the replicator loop: changed counters shipped to replicas.
//   - reconnectLoop: rejoins members gossip declared dead (every 2 s for
//     2 minutes, then every 30 s up to 15 minutes), so the two sides of a
//     healed network split merge again.
//   - joinLoop (only while a --join has found no other member): retries
//     the join with backoff.
//   - serveHealth: sets grpc.health.v1 to SERVING once the node is first
//     ready, then ends; Leave turns it NOT_SERVING for good.
//   - opsLoop: steps the per-rule rates every 2 s and rotates the hot-key
//     windows; opsState.mu guards the sketches, rates and gateway reports
//     (the check path takes it once per batch, for sampled items only);
//     the events buffer has its own small lock.
//   - the member book the gossip callbacks fill (clusterview.Book, the
//     ring-view policy's source) has its own lock; the forwarder table
//     is swapped atomically (fwdTable.mu serializes changes) and each
//     forwarder has its own lock. None is held while calling out.
package node
