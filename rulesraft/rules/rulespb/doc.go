// Package rulespb converts Weir's rule model (package rules) to and from its
// wire form (package weirv1). It imports only those two, so a gateway SDK can
// use it without linking the node or Raft.
//
// Invariants:
//   - Conversions are pure: no I/O, no clock, no package-level state.
//   - ToProto never fails; FromProto reports every problem it finds in one
//     *rules.ValidationError (errors.Is(err, rules.ErrInvalid) holds), and
//     does not otherwise validate: callers run rules.Validate as they need.
//   - Durations travel as Go duration strings (exact round trip); override
//     expiry travels as Unix milliseconds (sub-millisecond precision is
//     dropped), 0 meaning "never".
package rulespb
