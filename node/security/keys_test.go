package security

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/peerauth"
)

// The keyring persisted in the data dir wins over the configured keys,
// unless those were written later (an operator updated the file after a
// rotation the node missed); without a configured key the persisted one
// is used.
func TestKeyringPrecedence(t *testing.T) {
	persisted, configured := peerauth.GenerateKey(), peerauth.GenerateKey()
	dir := t.TempDir()
	path := filepath.Join(dir, KeyringFile)
	if err := peerauth.WriteKeyringFile(path, persisted, nil); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name    string
		keys    [][]byte
		written time.Time
		want    []byte
	}{
		{"no configured key", nil, time.Time{}, persisted},
		{"configured, time unknown", [][]byte{configured}, time.Time{}, persisted},
		{"configured before the rotation", [][]byte{configured}, at.Add(-time.Minute), persisted},
		{"configured after the rotation", [][]byte{configured}, at.Add(time.Minute), configured},
	} {
		s := Settings{ClusterName: "weir", GossipAddr: "127.0.0.1:7946", RaftAddr: "127.0.0.1:7000"}
		s.DataDir, s.Keys, s.KeysWritten = dir, tc.keys, tc.written
		_, kr, err := LoadKeys(s, log)
		if err != nil {
			t.Fatal(err)
		}
		if got := kr.GetPrimaryKey(); !bytes.Equal(got, tc.want) {
			t.Errorf("%s: primary %s, want %s", tc.name, peerauth.Fingerprint(got), peerauth.Fingerprint(tc.want))
		}
	}
}
