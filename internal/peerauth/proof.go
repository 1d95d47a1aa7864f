package peerauth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// Keys is where the gossip keys come from: memberlist's *Keyring, which
// changes at run time (weir keyring install/use/remove).
type Keys interface {
	GetKeys() [][]byte
	GetPrimaryKey() []byte
}

// DefaultWindow is how far a proof's timestamp may be from the verifier's
// clock, either way (clock skew between nodes plus the call's latency).
const DefaultWindow = time.Minute

// Authenticator signs and verifies proofs that the signer holds a key of
// the cluster's gossip keyring. It is safe for concurrent use.
type Authenticator struct {
	cluster string
	keys    Keys
	// Now and Window may be set before use (tests).
	Now    func() time.Time
	Window time.Duration
}

// New returns an Authenticator for the named cluster over keys.
func New(cluster string, keys Keys) *Authenticator {
	return &Authenticator{cluster: cluster, keys: keys, Now: time.Now, Window: DefaultWindow}
}

// subkey derives the proof key from a gossip key, so the gossip key itself
// never keys a MAC an outsider can see, and proofs for one cluster name
// are worthless for another.
func (a *Authenticator) subkey(k []byte) []byte {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("weir node proof v1\x00"))
	m.Write([]byte(a.cluster))
	return m.Sum(nil)
}

func (a *Authenticator) mac(k []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, a.subkey(k))
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// Token is a proof, valid for Window around now, that node id holds the
// primary key: "v1.<id>.<unix ms>.<mac>" (id and mac base64url).
func (a *Authenticator) Token(id string) string {
	ts := strconv.FormatInt(a.Now().UnixMilli(), 10)
	mac := a.mac(a.keys.GetPrimaryKey(), "call", id, ts)
	return "v1." + base64.RawURLEncoding.EncodeToString([]byte(id)) + "." + ts + "." + base64.RawURLEncoding.EncodeToString(mac)
}

// VerifyToken checks a Token against every key of the keyring (so a proof
// signed with a key being rotated in or out passes) and returns the node
// id it names. A token outside the window, malformed, or signed with no
// key of the keyring fails.
func (a *Authenticator) VerifyToken(tok string) (string, bool) {
	return a.verify(tok, "call")
}

func (a *Authenticator) verify(tok, purpose string) (string, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 4 || parts[0] != "v1" {
		return "", false
	}
	idb, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", false
	}
	ms, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return "", false
	}
	if d := a.Now().Sub(time.UnixMilli(ms)); d > a.Window || d < -a.Window {
		return "", false
	}
	mac, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil {
		return "", false
	}
	id := string(idb)
	if a.anyKey(mac, purpose, id, parts[2]) {
		return id, true
	}
	return "", false
}

func (a *Authenticator) anyKey(mac []byte, parts ...string) bool {
	ok := false
	for _, k := range a.keys.GetKeys() {
		if hmac.Equal(mac, a.mac(k, parts...)) {
			ok = true // no early return: time does not tell which key
		}
	}
	return ok
}

// MemberProof is the proof a node gossips in its metadata: node id, run
// (boot) and the primary key. Gossip is encrypted with the same keyring,
// so it is not replayable by an outsider; it lets a receiver drop a member
// whose metadata no key of its keyring signed.
func (a *Authenticator) MemberProof(id string, boot uint64) []byte {
	return a.mac(a.keys.GetPrimaryKey(), "member", id, strconv.FormatUint(boot, 10))[:16]
}

// VerifyMember checks a MemberProof against every key of the keyring.
func (a *Authenticator) VerifyMember(id string, boot uint64, proof []byte) bool {
	if len(proof) != 16 {
		return false
	}
	ok := false
	for _, k := range a.keys.GetKeys() {
		if hmac.Equal(proof, a.mac(k, "member", id, strconv.FormatUint(boot, 10))[:16]) {
			ok = true
		}
	}
	return ok
}

// Verifier is the node proof check an authorization layer calls: the
// calling node's id and whether the call proved it is a node of this
// cluster.
type Verifier func(ctx context.Context) (nodeID string, ok bool)

// TokenFor is a Token bound to purpose (such as a request's method, path
// and body digest): it verifies only with VerifyTokenFor and the same
// purpose, so one seen on the wire cannot be replayed for another request.
func (a *Authenticator) TokenFor(id, purpose string) string {
	ts := strconv.FormatInt(a.Now().UnixMilli(), 10)
	mac := a.mac(a.keys.GetPrimaryKey(), "call:"+purpose, id, ts)
	return "v1." + base64.RawURLEncoding.EncodeToString([]byte(id)) + "." + ts + "." + base64.RawURLEncoding.EncodeToString(mac)
}

// VerifyTokenFor checks a TokenFor made for purpose.
func (a *Authenticator) VerifyTokenFor(tok, purpose string) (string, bool) {
	return a.verify(tok, "call:"+purpose)
}
