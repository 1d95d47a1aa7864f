// Package node is the composition root of one Weir process. It builds the
// parts below, gives each what it needs at construction (small interfaces
// defined in the part's own package, satisfied here by adapters of a few
// lines), starts them, and stops them in order on Leave and Close. It owns
// no protocol, no algorithm and no state of its own: each part owns its
// fields and its goroutines, documented in its package. docs/design.md
// ("Map") says what each package owns and may import; test/docmap_test.go
// keeps that map equal to the tree.
//
// The parts it wires, by package:
//   - node/router: the check path: the compiled rule view, routing each
//     item (replication.Router over the hand-off's published routes), pins
//     against the hand-off, group settlement, limits and regional scaling.
//   - node/forward: the client side towards other nodes: the connection
//     pool and one coalescing forwarder per destination.
//   - node/peer: the Peer gRPC edge: forwarded checks, the replication
//     transport and the hand-off's asks.
//   - node/membership: gossip, the member book and cluster view, the ring
//     changes handed to the hand-off, the Raft group's bootstrap and
//     voters, join and rejoin.
//   - node/security: mutual TLS, roles (node/authz), admission of members,
//     keys and proofs, the peer guard and the keyring.
//   - node/ops: sampled events, hot keys, per-rule rates, gateway reports.
//   - the lower floors: node/shard (the counters), replication (replicator
//     and hand-off), rulesraft (the rules Raft group), node/persist
//     (durable counters), region (with --region).
//   - the edges: node/api (public gRPC and HTTP), node/rls (Envoy),
//     node/forwardauth, node/opsapi, node/keyringapi.
//
// The core speaks domain types only (limit.Item, limit.Result); protobuf is
// converted at the wire edges, and errors carry limit kinds that
// api.GRPCError and api.HTTPStatus map to codes.
package node
