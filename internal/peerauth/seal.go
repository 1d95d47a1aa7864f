package peerauth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
)

// ErrSealed reports a sealed value no key of the keyring opens.
var ErrSealed = errors.New("peerauth: sealed value not opened by any key of the keyring")

func (a *Authenticator) sealKey(k []byte) cipher.AEAD {
	m := hmac.New(sha256.New, k)
	m.Write([]byte("weir keyring seal v1\x00"))
	m.Write([]byte(a.cluster))
	b, _ := aes.NewCipher(m.Sum(nil)) // 32 bytes: never fails
	g, _ := cipher.NewGCM(b)
	return g
}

// Seal encrypts secret (a new gossip key sent from node to node) with
// AES-256-GCM under a key derived from the primary key, so it never
// crosses the wire in clear. The result is base64.
func (a *Authenticator) Seal(secret []byte) string {
	g := a.sealKey(a.keys.GetPrimaryKey())
	nonce := make([]byte, g.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.StdEncoding.EncodeToString(g.Seal(nonce, nonce, secret, []byte(a.cluster)))
}

// Open decrypts a Seal with any key of the keyring.
func (a *Authenticator) Open(sealed string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil {
		return nil, ErrSealed
	}
	for _, k := range a.keys.GetKeys() {
		g := a.sealKey(k)
		if len(b) < g.NonceSize() {
			return nil, ErrSealed
		}
		if out, err := g.Open(nil, b[:g.NonceSize()], b[g.NonceSize():], []byte(a.cluster)); err == nil {
			return out, nil
		}
	}
	return nil, ErrSealed
}
