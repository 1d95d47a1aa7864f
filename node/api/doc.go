// Package api is the client-facing front of a Weir node: the gRPC Limiter,
// Rules and Cluster services and the HTTP/JSON API (plus /metrics, /healthz
// and /readyz). They are two thin sibling edges over one Backend interface
// in domain terms (package limit's Item and Result, rules.Rule, Members):
// each reads its wire into domain values, calls one shared operation
// (core.go) and writes the answer back. It owns request validation, the
// admin-token check, forwarding of rule writes to the Raft leader, and the
// one mapping from errors to gRPC codes and HTTP statuses. It holds no
// rate-limit or rule logic: decisions come from the Backend (the node),
// rules from its RuleStore, and the rule merge from rules.Merge.
//
// Invariants:
//   - No proto type crosses the Backend: the gRPC services convert at the
//     edge (limit/limitpb, rulespb), and the HTTP handlers never go through
//     the gRPC services. A rule write from HTTP goes JSON → rules.Rule →
//     RuleStore.Apply on the leader; only a follower's forward to the
//     leader crosses gRPC (forward.go).
//   - Items are validated once, here (limit.DecideValid), where they enter
//     the node; the Backend trusts them. Check never fails a whole batch
//     for one bad item: shape errors (empty, oversized or non-UTF-8 key,
//     empty rule, negative cost) come back in that item's result and the
//     item is not sent to the Backend.
//   - Every write takes an admin value, which only Server.authorize hands
//     out: both edges call it as soon as they know the caller (gRPC
//     metadata, the HTTP Authorization header), so no write skips the
//     token check. A caller node/authz found to be an admin or a node (a
//     certificate, or the token) passes it (authz.FromContext); roles are
//     enforced by node/authz in front of this package. Nothing is applied unless the whole request is valid.
//   - A write is applied, and stamped (Command.At), only on the leader; a
//     follower forwards it once, authorization included (a forwarded
//     request that meets a non-leader fails with FailedPrecondition / HTTP
//     503 not_leader instead of bouncing). A leader that loses leadership
//     mid-Apply does not forward: the outcome is unknown and the caller
//     retries.
//   - Reads of rules, history and overrides (and dry runs) are
//     read-your-writes unless the caller asks for a stale one: the node
//     first learns the leader's read index (RuleStore.ReadIndex on the
//     leader, the Rules.ReadIndex RPC from a follower, never passed on
//     further) and waits until its own store has applied it, all within
//     Config.ReadTimeout; otherwise the read fails (503), it never answers
//     older data unasked. Every HTTP read says how it was served ("read").
//     A follower answers a write it forwarded once it applied it too
//     (bounded, best effort).
//   - Dry runs and request validation use the local rule set (caught up,
//     for a dry run) and rules.Merge; the FSM merges again, with the same
//     function, against the leader's.
//   - Every error carries a limit kind (limit.ErrInvalid, ErrUnavailable,
//     ...). GRPCError maps kinds to gRPC codes (node's peer server uses it
//     too) and fromGRPC a peer's codes back to kinds; HTTPStatus maps kinds
//     to HTTP statuses. Nothing else picks status codes.
//   - HTTP JSON bodies are read strictly, so what a caller sent is what
//     Weir uses: malformed JSON, unknown fields, trailing data, a name given
//     twice in one object (at any depth, in any case) and text that is not
//     UTF-8 (raw bytes, or escaped lone surrogates, which encoding/json
//     would turn into U+FFFD) are errors (400).
//
// Goroutines: the package starts none of its own. Handlers run on the
// gRPC/HTTP servers' goroutines; Close cancels the context every Watch,
// WatchMembers and long-poll handler selects on, waits for those handlers
// to return, and closes the cached leader connections. Call Close before
// stopping the gRPC server. Server state (leader connection cache, gateway
// counts) is guarded by Server.mu; metrics are registered per Server on the
// registry passed in; the request buffers of the Limiter service come from
// a per-Server pool (limitpb.BatchPool).
package api
