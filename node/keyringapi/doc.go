// Package keyringapi is the HTTP edge of gossip key rotation (weir
// keyring): GET /v1/keyring and POST /v1/keyring/{install,use,remove}.
//
// An admin asks any node; it checks the change is safe for every live
// member, applies it to its own keyring (node/security persists it in the
// data dir), and makes the same change on every other live member over
// HTTP (the same endpoints), each call carrying this node's proof bound to
// the request (peerauth.TokenFor over method, path and body digest) and
// the key sealed under the current keyring (peerauth.Seal): a key never
// crosses the wire in clear between nodes, and a proof seen on the wire is
// good for no other request. Without a gossip key there is no keyring to
// change.
//
// The API holds no state of its own: the keyring and its lock belong to
// node/security, the members to membership. A fan-out runs one goroutine a
// member and waits for all of them (bounded by a 5 s timeout).
package keyringapi
