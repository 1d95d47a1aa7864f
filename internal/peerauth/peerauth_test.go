package peerauth

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func keyring(t *testing.T, keys ...[]byte) *memberlist.Keyring {
	t.Helper()
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func TestToken(t *testing.T) {
	k1, k2 := GenerateKey(), GenerateKey()
	now := time.Unix(1_800_000_000, 0)
	signer := New("weir", keyring(t, k1))
	signer.Now = func() time.Time { return now }
	tok := signer.Token("n1")

	verifier := New("weir", keyring(t, k2, k1)) // k1 installed, not primary
	verifier.Now = func() time.Time { return now.Add(30 * time.Second) }
	if id, ok := verifier.VerifyToken(tok); !ok || id != "n1" {
		t.Fatalf("VerifyToken = %q, %v; want n1, true", id, ok)
	}

	for name, v := range map[string]*Authenticator{
		"wrong key":     New("weir", keyring(t, k2)),
		"other cluster": New("other", keyring(t, k1)),
	} {
		v.Now = verifier.Now
		if _, ok := v.VerifyToken(tok); ok {
			t.Errorf("%s: token accepted", name)
		}
	}
	stale := New("weir", keyring(t, k1))
	stale.Now = func() time.Time { return now.Add(DefaultWindow + time.Second) }
	if _, ok := stale.VerifyToken(tok); ok {
		t.Error("stale token accepted")
	}
	stale.Now = func() time.Time { return now.Add(-DefaultWindow - time.Second) }
	if _, ok := stale.VerifyToken(tok); ok {
		t.Error("token from the future accepted")
	}
	// Another id or timestamp with the same MAC fails.
	parts := strings.Split(tok, ".")
	forged := strings.Join([]string{parts[0], "bjI", parts[2], parts[3]}, ".")
	if _, ok := verifier.VerifyToken(forged); ok {
		t.Error("token with another id accepted")
	}
	for _, bad := range []string{"", "v1", "v1.a.b.c", "v2." + strings.Join(parts[1:], "."), tok + "."} {
		if _, ok := verifier.VerifyToken(bad); ok {
			t.Errorf("malformed %q accepted", bad)
		}
	}
}

func TestMemberProof(t *testing.T) {
	k1, k2 := GenerateKey(), GenerateKey()
	a := New("weir", keyring(t, k1))
	p := a.MemberProof("n1", 7)
	if !New("weir", keyring(t, k2, k1)).VerifyMember("n1", 7, p) {
		t.Fatal("proof refused by a keyring holding the key")
	}
	if New("weir", keyring(t, k2)).VerifyMember("n1", 7, p) {
		t.Error("proof accepted without the key")
	}
	if a.VerifyMember("n2", 7, p) || a.VerifyMember("n1", 8, p) || a.VerifyMember("n1", 7, nil) {
		t.Error("proof accepted for another id, run or none")
	}
}

func TestParseKeyring(t *testing.T) {
	k1, k2 := GenerateKey(), GenerateKey()
	keys, err := ParseKeyring([]byte("# comment\n\n " + EncodeKey(k1) + " \n" + EncodeKey(k2) + "\n" + EncodeKey(k1) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || !bytes.Equal(keys[0], k1) || !bytes.Equal(keys[1], k2) {
		t.Fatalf("keys = %x", keys)
	}
	for name, in := range map[string]string{
		"empty":      "# nothing\n",
		"short":      EncodeKey(k1[:16]),
		"not base64": "not-a-key!!",
	} {
		if _, err := ParseKeyring([]byte(in)); !errors.Is(err, ErrKeyring) {
			t.Errorf("%s: err = %v, want ErrKeyring", name, err)
		}
	}
	path := filepath.Join(t.TempDir(), "keyring")
	if err := WriteKeyringFile(path, k2, [][]byte{k1, k2}); err != nil {
		t.Fatal(err)
	}
	back, err := ReadKeyringFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || !bytes.Equal(back[0], k2) || !bytes.Equal(back[1], k1) {
		t.Fatalf("read back %x, want primary k2 then k1", back)
	}
}

func TestTokenForAndSeal(t *testing.T) {
	k1, k2 := GenerateKey(), GenerateKey()
	a := New("weir", keyring(t, k1))
	tok := a.TokenFor("n1", "POST /v1/keyring/install abc")
	if id, ok := New("weir", keyring(t, k2, k1)).VerifyTokenFor(tok, "POST /v1/keyring/install abc"); !ok || id != "n1" {
		t.Fatalf("VerifyTokenFor = %q %v", id, ok)
	}
	if _, ok := a.VerifyTokenFor(tok, "POST /v1/keyring/install abd"); ok {
		t.Error("token accepted for another purpose")
	}
	if _, ok := a.VerifyToken(tok); ok {
		t.Error("purpose-bound token accepted as a call token")
	}
	if _, ok := a.VerifyTokenFor(a.Token("n1"), "x"); ok {
		t.Error("call token accepted for a purpose")
	}

	secret := GenerateKey()
	sealed := a.Seal(secret)
	if strings.Contains(sealed, EncodeKey(secret)) {
		t.Fatal("sealed value holds the secret in clear")
	}
	got, err := New("weir", keyring(t, k2, k1)).Open(sealed)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open = %x, %v", got, err)
	}
	for name, b := range map[string]*Authenticator{"another key": New("weir", keyring(t, k2)), "another cluster": New("x", keyring(t, k1))} {
		if _, err := b.Open(sealed); !errors.Is(err, ErrSealed) {
			t.Errorf("%s: Open err %v, want ErrSealed", name, err)
		}
	}
	if _, err := a.Open("AAAA"); !errors.Is(err, ErrSealed) {
		t.Errorf("short: %v", err)
	}
}
