// Package limit is the vocabulary every part of Weir shares for a
// rate-limit check, free of any wire format: the Item a caller asks about,
// the Result it gets back, the one validator of an item's shape, and the
// kinds of error (ErrInvalid, ErrUnavailable, ...) that every edge maps to
// a status in one place per wire (node/api: a gRPC code, an HTTP status).
//
// The core (node, node/shard) decides Items and answers Results; the edges
// (the gRPC and HTTP APIs, the node-to-node peer server and forwarder)
// convert their wire format to and from these types and nothing else goes
// further in. limitpb holds the protobuf conversions.
//
// Invariants:
//   - It is pure: no I/O, no clock, no goroutines, no package-level mutable
//     state, and it imports nothing outside the standard library but bucket.
//   - ValidateItem is the only item validator. Every edge that takes items
//     from a wire (HTTP, gRPC, a peer's forward) runs it once, through
//     DecideValid, before the items go any further; the core trusts them.
//   - Keys are byte-exact: a key that is not valid UTF-8 is refused rather
//     than repaired, so two different byte strings never share a counter.
//   - Every error an edge must map carries one of the kinds below
//     (errors.Is); a package keeps its own sentinels and messages and marks
//     them with a kind through Errorf.
package limit
