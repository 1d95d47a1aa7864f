// Package peerauth proves that a caller is a node of this cluster when no
// TLS certificate says so: it derives proofs from the gossip keyring that
// only the cluster's nodes hold.
//
// A Token (per gRPC call, in the "weir-node-proof" metadata entry, or an
// HTTP header of that name) is node id + unix ms + HMAC-SHA256 keyed by a
// key derived from the primary gossip key and the cluster name. It is
// verified against every key of the keyring (so proofs survive key
// rotation), within Window of the verifier's clock, in constant time. A
// MemberProof in a node's gossip metadata ties its id and run to the
// keyring, so the ring and Raft ignore members that carry none.
//
// Keyring files hold one base64 key of 32 bytes per line; the first is the
// primary. The package holds no state of its own: the keys are read from
// a Keys (memberlist's Keyring) at every call.
package peerauth
