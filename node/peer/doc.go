// Package peer is the node-to-node gRPC edge (the Peer service) and the
// peer side of replication and hand-off on the wire.
//
// Server decides the items a peer forwards (Forward, ForwardStream)
// through a Checker, after converting and validating them (a node does
// not trust the wire), stores the counter copies owners ship (Replicate,
// ReplicateStream) and serves a new owner's pull (Handoff). Who calls is
// decided by a Guard and an Identity the node hands in; the package
// defines those interfaces and knows no node internals.
//
// Transport (replication.Streams) ships counter copies to replicas on one
// pipelined ReplicateStream per peer; Puller (replication.Peers) pulls
// partitions from their holder. Both dial through Conns (the node's
// connection pool, node/forward.Table). Counter states that arrive are
// moved onto this node's clock (onOurClock).
//
// Goroutines: none of its own; each RPC runs on its gRPC goroutine (a
// ForwardStream request that may wait is decided aside, see
// internal/checkstream). Transport's fallback marks are under its mutex.
package peer
