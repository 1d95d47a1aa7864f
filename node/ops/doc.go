// Package ops is a node's operator view of the decisions it answers as the
// entry node (where a check came in): weir_checks_total and the check
// latency, sampled limit events, hot keys per rule, per-rule rates, the
// reports of gateways and the concurrency permits in use; and it serves
// them through node/opsapi (the dashboard, /v1/events, /v1/hotkeys, the
// snapshot, gateway reports, the gRPC Ops service).
//
// Ops owns its state and reads the rest of the node through the small
// interfaces of New (RuleView, Store, Members, Permits), which package
// node satisfies: it knows no ring, gossip, forwarder or shard.
//
// Nothing here is on the decision's critical path beyond Observe, which
// allocates only for a sampled event or a sketch's new key.
//
// Goroutines and locks: Observe runs on the check path's goroutines; Run
// (one goroutine, the node's) steps the per-rule rates every RateStep and
// rotates the hot-key windows. Ops.mu guards the sketches, rates and
// gateway reports (Observe takes it once per batch, for sampled items
// only); the events buffer has its own small lock; the check counters are
// cached in a sync.Map. None is held while calling out of the package.
package ops
