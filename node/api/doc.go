// Package api is the client-facing front-end of a Weir node: the gRPC
// Limiter, Rules and Cluster services and the HTTP/JSON API (plus /metrics,
// /healthz and /readyz). It owns request validation, admin-token checks,
// forwarding of rule writes to the Raft leader, and the one mapping from
// errors to gRPC and HTTP status codes. It holds no rate-limit or rule logic:
// decisions come from the Backend (the node) and rules from its
// rulesraft.Store.
//
// Invariants:
//   - Every rule write goes through the gRPC Rules methods; the HTTP handlers
//     call them in-process, so validation, auth and forwarding live in one
//     place. Nothing is applied unless the whole request is valid.
//   - A write is applied, and stamped (Command.At), only on the leader; a
//     follower forwards the original request once, authorization metadata
//     included (a forwarded request that meets a non-leader fails with
//     FailedPrecondition / HTTP 503 not_leader instead of bouncing). A
//     leader that loses leadership mid-Apply does not forward: the outcome
//     is unknown and the caller retries.
//   - Dry runs and request validation use the local rule set; the FSM
//     validates again against the leader's.
//   - Errors become gRPC codes in grpcError and gRPC codes become HTTP codes
//     in HTTPStatus; nothing else picks status codes.
//   - Check never fails a whole batch for one bad item: shape errors (empty
//     or oversized key, empty rule, negative cost) come back in that item's
//     CheckResult and the item is not sent to the Backend.
//
// Goroutines: the package starts none of its own. Handlers run on the
// gRPC/HTTP servers' goroutines; Close cancels the context every Watch,
// WatchMembers and long-poll handler selects on, waits for those handlers
// to return, and closes the cached leader connections. Call Close before
// stopping the gRPC server. Server state (leader connection cache, gateway
// counts) is guarded by Server.mu; metrics are registered per Server on the
// registry passed in.
package api
