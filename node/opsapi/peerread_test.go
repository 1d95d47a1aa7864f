package opsapi

import (
	"net/http/httptest"
	"testing"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/node/authz"
)

type keys [][]byte

func (k keys) GetKeys() [][]byte     { return k }
func (k keys) GetPrimaryKey() []byte { return k[0] }

// Each kind of cluster gets its one credential on a peer read, and a read
// proof checks only where one was made, with the same key.
func TestPeerCredential(t *testing.T) {
	key := keys{peerauth.GenerateKey()}
	signed := PeerCredential{Self: "n1", Keys: peerauth.New("weir", key), ReadToken: "r", AdminToken: "a"}
	for name, c := range map[string]struct {
		cred       PeerCredential
		proof      bool
		authHeader string
	}{
		"tls":        {PeerCredential{Self: "n1", TLS: true, Keys: signed.Keys, ReadToken: "r"}, false, ""},
		"gossip key": {signed, true, ""},
		"read token": {PeerCredential{Self: "n1", ReadToken: "r", AdminToken: "a"}, false, "Bearer r"},
		"admin only": {PeerCredential{Self: "n1", AdminToken: "a"}, false, "Bearer a"},
	} {
		r := httptest.NewRequest("GET", "/v1/events", nil)
		c.cred.Authorize(r)
		if got := r.Header.Get(authz.ReadProofHeader) != ""; got != c.proof {
			t.Errorf("%s: read proof sent %v, want %v", name, got, c.proof)
		}
		if got := r.Header.Get("Authorization"); got != c.authHeader {
			t.Errorf("%s: Authorization %q, want %q", name, got, c.authHeader)
		}
	}
	r := httptest.NewRequest("GET", "/v1/events", nil)
	signed.Authorize(r)
	proof := r.Header.Get(authz.ReadProofHeader)
	if !signed.Check(proof) {
		t.Fatal("a member's own read proof does not check")
	}
	other := PeerCredential{Self: "n2", Keys: peerauth.New("weir", keys{peerauth.GenerateKey()})}
	if other.Check(proof) || (PeerCredential{TLS: true, Keys: signed.Keys}).Check(proof) || (PeerCredential{}).Check(proof) {
		t.Fatal("a read proof checked under another key, under TLS or without a key")
	}
	if signed.Check(signed.Keys.TokenFor("n1", "peer")) {
		t.Fatal("a proof for another purpose checked as a read proof")
	}
}
