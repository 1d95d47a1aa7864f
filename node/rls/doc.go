// Package rls serves Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on a
// node's gRPC port: a thin adapter from the Envoy wire to the node's
// check Backend, in domain types.
//
// A request is a domain and descriptors. Each descriptor is matched
// against the rules with that domain (rules.DescriptorMatcher: the most
// specific patterns win, as in envoyproxy/ratelimit); each rule that
// applies is one limit.Item at the key built from the domain and the
// descriptor's values, sent through Backend.Check (so it is decided at the
// key's owner, forwarded and coalesced like every other check). A
// descriptor no rule matches is not limited.
//
// The pure part is plan (request → items) and answer (results →
// response), in domain types; the edge converts the wire: on a node (whose
// codec is internal/grpcwin's) wire.go decodes the request and encodes the
// answer by hand with protowire, equal to the reflective codec's
// (TestWireDecodeMatchesReflective, TestWireEncodeMatchesReflective,
// FuzzWireRequest); ShouldRateLimit takes the generated messages. Invariants:
//   - A malformed request (empty or oversized domain, too many
//     descriptors or entries, empty keys, oversized or non-UTF-8 keys and
//     values, a huge hits_addend) is InvalidArgument as a whole and
//     reaches no counter.
//   - hits_addend: a descriptor's own (a wrapper: 0 peeks) wins over the
//     request's (0 there means 1, as Envoy documents). is_negative_hits
//     gives the hits back (limit.Item.Refund) only with
//     Config.Trust.NegativeHits; otherwise the descriptor peeks (cost 0)
//     and weir_rls_ignored_total{kind="negative_hits"} counts it: refunds
//     come from nodes, and any Envoy that reaches the port could send one.
//   - Shadow rules are decided and counted but never make a status
//     OVER_LIMIT.
//   - All-or-nothing (Config.AllOrNothing, default true): the items of one
//     request share one group, so a request that is over one limit takes
//     nothing from the others. With it off, each descriptor is its own
//     group, as envoyproxy/ratelimit charges every descriptor.
//   - With Config.Trust.Overrides, a descriptor's limit override
//     (RateLimitOverride) replaces the matched rules' rate, period and
//     burst for that check (limit.Item.Override, carried to the owner); a
//     descriptor no rule matches stays unlimited. Overrides in months or
//     years, of 0 requests, or that the rule's algorithm cannot take (a
//     sliding_log over its cap) are InvalidArgument. Without it the rule's
//     own limit applies and weir_rls_ignored_total{kind="override"} counts
//     the override (one in months or years or of 0 is still
//     InvalidArgument).
//
// Goroutines: none of its own; ShouldRateLimit runs on the gRPC server's.
// The compiled matcher is swapped atomically when the rule set's version
// changes.
package rls
