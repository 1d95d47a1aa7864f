// Package opsapi is the operators' edge of a node: the dashboard at /ui/
// (one embedded HTML page, no external assets), sampled limit events
// (GET /v1/events, JSON or server-sent events, and the gRPC Ops.Events
// stream), hot keys (GET /v1/hotkeys, Ops.HotKeys), the dashboard's
// snapshot (GET /v1/ops/snapshot) and gateway reports (POST
// /v1/gateways/report). It is a thin adapter over Source, which the node
// implements; it holds no decision logic.
//
// Cluster scope: the per-node parts (rates, hot keys, events, gateway
// reports) live on the node where checks entered. A cluster-scoped read
// (the default) asks every other live member's HTTP API for its local
// part (scope=local, within PeerTimeout) with this node's credential
// (Config.PeerTLS, Config.PeerAuth) and merges; members that do not
// answer are listed in "failed"; an answer over 8 MiB is a failure.
// Cluster followers of events share one feed (feed.go) that polls the
// other members each FollowPoll in pages of at most PeerPage events, so
// one connection shows the whole cluster and N followers cost one poll.
// At most MaxFollowers are served at once (429, ResourceExhausted).
//
// Goroutines: request handlers, and the feed's one polling goroutine
// while a cluster follower is connected (it ends at the first poll with
// none, or with the Server's context; Close waits for it); a following
// handler ends when its client goes away or the Server's context (the
// node's) is canceled.
package opsapi
