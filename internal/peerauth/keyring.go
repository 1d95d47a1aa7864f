package peerauth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the length of a gossip key: AES-256.
const KeySize = 32

// ErrKeyring reports a malformed keyring file or key.
var ErrKeyring = errors.New("peerauth: invalid keyring")

// ParseKey decodes one base64 key (standard or URL alphabet, padded or
// not) and checks its length.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil {
			if len(k) != KeySize {
				return nil, fmt.Errorf("%w: a key is %d bytes, want %d (generate one with `weir keyring generate`)", ErrKeyring, len(k), KeySize)
			}
			return k, nil
		}
	}
	return nil, fmt.Errorf("%w: a key is not base64", ErrKeyring)
}

// Fingerprint names a key without revealing it: the first 8 bytes of its
// SHA-256, hex (what weir keyring and the keyring API show).
func Fingerprint(k []byte) string {
	s := sha256.Sum256(k)
	return hex.EncodeToString(s[:8])
}

// EncodeKey is a key as the keyring file writes it (standard base64).
func EncodeKey(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// GenerateKey returns a new random key.
func GenerateKey() []byte {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return k
}

// ParseKeyring reads a keyring file: one base64 key of 32 bytes per line,
// the first being the primary (the one this node encrypts and signs
// with); the others are accepted on receipt. Blank lines and lines
// starting with # are ignored; a key listed twice is kept once.
func ParseKeyring(b []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := ParseKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		if !containsKey(keys, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no key (want one base64 key of %d bytes per line)", ErrKeyring, KeySize)
	}
	return keys, nil
}

// FormatKeyring writes keys in the keyring file format, primary first.
func FormatKeyring(primary []byte, keys [][]byte) []byte {
	var b bytes.Buffer
	b.WriteString("# weir gossip keyring: one base64 key per line, the first is the primary\n")
	b.WriteString(EncodeKey(primary) + "\n")
	for _, k := range keys {
		if !bytes.Equal(k, primary) {
			b.WriteString(EncodeKey(k) + "\n")
		}
	}
	return b.Bytes()
}

// ReadKeyringFile reads and parses a keyring file.
func ReadKeyringFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("peerauth: keyring: %w", err)
	}
	keys, err := ParseKeyring(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// WriteKeyringFile replaces path atomically (a temporary file renamed over
// it), readable by its owner only.
func WriteKeyringFile(path string, primary []byte, keys [][]byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".keyring-*")
	if err != nil {
		return fmt.Errorf("peerauth: keyring: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(FormatKeyring(primary, keys)); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("peerauth: keyring: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("peerauth: keyring: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("peerauth: keyring: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("peerauth: keyring: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("peerauth: keyring: %w", err)
	}
	return nil
}

func containsKey(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}
