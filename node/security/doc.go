// Package security is a node's security part: who may talk to the node and
// whom the node may believe.
//
// A Guard owns the TLS source (internal/tlsconf), the role policy
// (node/authz), the admission of members (with TLS a member enters the
// view, ring, forwarding and Raft, only after its gRPC port proved with a
// node certificate that it is node/<its id>), the gossip keyring and the
// node proofs made from it (internal/peerauth: on Peer calls, Raft
// connections and gossip metadata; without a key, gossip and Raft on
// loopback and Peer calls from loopback only), the identity guard
// (node/identity: node credentials bound to membership), and the counter
// of what was refused for want of a proof.
//
// It reads membership through Members, an interface the node satisfies
// over its membership part; it never reaches into the node.
//
// Goroutines and locks: member verifications run on goroutines started
// through Config.Go (the node joins them on Close); admission.mu guards the
// admission maps; keyringMu serializes keyring changes and the keyring file
// in the data dir. Refusal warnings are logged at most every 10 s (two
// atomic stamps).
package security
