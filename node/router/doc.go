// Package router owns a node's check path: the rule set compiled for
// checks (RuleView, one internal/rulecache value), the routing of each
// item (replication.Router over the cluster view and the hand-off's
// table), the pins that hold a hand-off off the partitions a check
// decides, the local decisions (the shard engine), the forwards to owners
// (Forwarder, a network link), group settlement (all-or-nothing across
// keys and nodes), the region hooks of global rules and the check's
// entry span.
//
// A Router receives its parts at construction (Config): the rule store,
// the shard engine, the hand-off, a view source, the forwarder, the clock,
// an observer (metrics, ops), the region agent, the tracer. Check is a
// caller's check (settled and observed); CheckForwarded is a peer's (the
// Peer edge's Checker).
//
// Goroutines: none of its own; Check runs on the caller's. The rule view
// is immutable and swapped atomically; a check's scratch comes from a
// sync.Pool and holds no state between checks. Pins are taken in
// ascending partition order and released before the remote answers are
// awaited.
package router
