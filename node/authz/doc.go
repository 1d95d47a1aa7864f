// Package authz decides what each caller of a node may do: one policy,
// applied by a gRPC interceptor pair and an HTTP middleware, so no
// endpoint is reachable around it.
//
// A caller's roles come from three sources, combined:
//   - its TLS certificate (verified by internal/tlsconf before any request
//     is read): node, gateway or admin, from spiffe://<cluster>/<role>/<name>;
//   - Config.NodeProof, a second source of the node role for clusters
//     without TLS (a proof derived from the gossip key, on gRPC metadata):
//     when it answers ok, the caller is a node;
//   - the admin token ("Authorization: Bearer <token>", compared in
//     constant time): admin.
//   - the read token (likewise) or, on HTTP, Config.ReadProof over the
//     Weir-Node-Proof header (a node reading another member's part with
//     its gossip key's proof): reader, which reads and never writes.
//
// The policy (docs/security.md):
//   - Peer (Forward, Replicate, Handoff and their streams): node only,
//     once TLS or NodeProof is configured.
//   - refund items on Limiter.Check/CheckStream: node only, likewise.
//   - rule and override writes: admin or node (a follower forwards an
//     admin's write with its node certificate), once TLS or a token is
//     configured.
//   - reads of rules, overrides and history (gRPC ListRules, GetRule,
//     History; HTTP GET /v1/rules..., /v1/overrides): any role or the
//     token, once TLS or a token is configured.
//   - gateway reports (Ops.Report, POST /v1/gateways/report): the gateway
//     role (a gateway or node certificate, a node proof, or
//     Config.GatewayToken) once TLS or a gateway token is configured;
//     anyone otherwise. GatewayOwnerOf binds the gateway ids of reports
//     and Rules.Watch to the caller's credential (or connection) and
//     bounds the ids one may hold.
//   - the gossip keyring (HTTP /v1/keyring...): under TLS admin or node
//     here; node/keyringapi then admits the admin role alone, or a
//     member's call carrying a key proof bound to the request.
//   - reads that show keys (HTTP /v1/events, /v1/hotkeys,
//     /v1/ops/snapshot, GET /v1/limits/{key}; gRPC Ops.Events,
//     Ops.HotKeys): the read role (Caller.Reads: node, admin or reader),
//     once TLS, the admin token or a read token is set; a gateway
//     certificate reads a key's limits only. /metrics stays as below but
//     marks such a caller KeysHidden, and node/api hashes key labels.
//   - HTTP GET /healthz and /readyz: anyone, also over HTTPS without a
//     client certificate (load balancers, kubelet probes); the HTTP
//     listener asks for a certificate but does not require one, and a
//     certificate given must still verify.
//   - everything else (Limiter, Watch, Cluster, gRPC health, /metrics):
//     any role under TLS (every verified certificate names one; a caller
//     without one is refused); open without TLS.
//
// Without TLS, NodeProof and a token, everything is open, as before (weir
// dev, loopback test clusters). The interceptors put the caller into the
// request's context (FromContext) for node/api, which lets a write
// through for an admin or node caller without the token.
//
// Goroutines: none; the Authorizer is immutable after New and safe for
// concurrent use.
package authz
