// Package rules is Weir's pure rule model: the rules and overrides admins
// write, their parsing from rules.yaml, validation, defaults, matching of
// requests to rules, and the diff shown by `weir rules diff`.
//
// It does no I/O, reads no clock (Override.Active takes now) and holds no
// package-level mutable state but a memo of the time zones calendar rules
// loaded (LoadZone: immutable values, read from the zone database once
// each), so a gateway links it without linking Raft; the Raft FSM in the
// parent package stores these types.
//
// Invariants:
//   - ParseFile takes or refuses a file as a whole; a refusal is a
//     *ValidationError listing every problem with its line and field, and
//     errors.Is(err, ErrInvalid) holds for every validation error.
//   - A rule that passes Validate yields a bucket.Limit that passes
//     bucket.Limit.Validate(MaxLogLimit).
//   - Validate never refuses what an earlier version stored: the FSM runs
//     it again on every replayed command. A refusal that tightens an old
//     rule (a fixed lease on a period of 1h or more) is CheckWrite's, which
//     the write edge runs beside Merge.
//   - Zero fields mean defaults (Normalize writes them out). A burst of 0
//     means "equal to rate"; YAML cannot tell "burst: 0" from an absent
//     burst, so an explicit 0 is not an error. A timeout of 0 means 5ms.
//   - A Matcher is immutable once Compile returns: Match is safe from any
//     number of goroutines, does not allocate when dst has room, and the
//     *Rule pointers it returns must not be written through.
//   - Route patterns: exact segments, whole-segment {param}, and "*" only as
//     the last segment, matching the prefix itself and everything below it.
//     Trailing slashes and empty segments do not matter, so "/v1/orders/"
//     cannot dodge a rule on "/v1/orders".
//   - All matching rules apply, except that a plan "*" rule gives way to a
//     rule of the same route pattern, method pattern and key that names the
//     request's plan.
//   - A rule with match.domain is a descriptor rule for Envoy's rate limit
//     service: keyed by "descriptor", no route, method or plan; the route
//     Matcher never returns it and the DescriptorMatcher returns nothing
//     else. Of the descriptor rules matching one descriptor, only the most
//     specific patterns apply (as envoyproxy/ratelimit); replaces and
//     unlimited exist for those rules only.
package rules
