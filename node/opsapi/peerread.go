package opsapi

import (
	"net/http"

	"github.com/weirlimit/weir/node/authz"
)

// Signer makes and checks a gossip key's proofs for one purpose
// (peerauth.Authenticator).
type Signer interface {
	TokenFor(id, purpose string) string
	VerifyTokenFor(tok, purpose string) (string, bool)
}

// readPurpose binds a read proof to reading other members' parts: it
// grants the reader role, nothing else.
const readPurpose = "ops-read"

// PeerCredential is what a member shows another when it reads that
// member's part of a cluster-wide read (events, hot keys, the ops
// snapshot), and checks when it is read.
type PeerCredential struct {
	Self string
	// TLS: the node certificate speaks (Config.PeerTLS); nothing is added
	// to the request and no proof is taken.
	TLS bool
	// Keys: the gossip key's proofs; nil without a key.
	Keys Signer
	// ReadToken, else AdminToken: the credential when there is neither TLS
	// nor a key (members are then on loopback).
	ReadToken, AdminToken string
}

// Authorize adds the credential to r (Config.PeerAuth).
func (c PeerCredential) Authorize(r *http.Request) {
	switch {
	case c.TLS:
	case c.Keys != nil:
		r.Header.Set(authz.ReadProofHeader, c.Keys.TokenFor(c.Self, readPurpose))
	case c.ReadToken != "":
		r.Header.Set("Authorization", "Bearer "+c.ReadToken)
	case c.AdminToken != "":
		r.Header.Set("Authorization", "Bearer "+c.AdminToken)
	}
}

// Check reports whether proof is another member's read proof
// (authz.Config.ReadProof): without TLS, with a gossip key.
func (c PeerCredential) Check(proof string) bool {
	if c.TLS || c.Keys == nil {
		return false
	}
	_, ok := c.Keys.VerifyTokenFor(proof, readPurpose)
	return ok
}
