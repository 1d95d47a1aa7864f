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
// part (scope=local, within PeerTimeout) and merges; members that do not
// answer are listed in "failed". Following events polls the other
// members each FollowPoll, so one connection shows the whole cluster.
//
// Goroutines: none of its own beyond request handlers; a following
// handler ends when its client goes away or the Server's context (the
// node's) is canceled.
package opsapi
