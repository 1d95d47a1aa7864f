package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/node"
)

// weir keyring against two real nodes: generate writes a keyring file once
// and keeps it; install, use and remove reach both nodes; list shows
// fingerprints; a malformed key is a usage error that sends nothing.
func TestKeyringCommands(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "keyring")
	r := runCLI(t, "", nil, "keyring", "generate", "--out", file)
	if r.code != 0 || !strings.Contains(r.stdout, "wrote a new keyring") {
		t.Fatalf("generate --out: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	first, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o600 {
		t.Errorf("keyring file mode %v, want 0600", st.Mode().Perm())
	}
	if r := runCLI(t, "", nil, "keyring", "generate", "--out", file); r.code != 0 || !strings.Contains(r.stdout, "kept") {
		t.Fatalf("second generate --out: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	if again, _ := os.ReadFile(file); string(again) != string(first) {
		t.Fatal("generate --out replaced an existing keyring")
	}
	old, err := peerauth.ReadKeyringFile(file)
	if err != nil {
		t.Fatal(err)
	}

	const token = "k3y"
	c := testcluster.NewWith(t, 2, testcluster.Options{Config: func(cfg *node.Config) { cfg.GossipKeys, cfg.AdminToken = old, token }})
	env := map[string]string{envAddr: c.Nodes[1].HTTPAddr(), envToken: token}
	r = runCLI(t, "", nil, "keyring", "generate")
	newKey := strings.TrimSpace(r.stdout)
	if _, err := peerauth.ParseKey(newKey); r.code != 0 || err != nil {
		t.Fatalf("generate: exit %d %q: %v", r.code, r.stdout, err)
	}
	fpOld, fpNew := peerauth.Fingerprint(old[0]), peerauth.Fingerprint(mustKey(t, newKey))
	for _, step := range [][]string{{"install", newKey}, {"use", newKey}, {"remove", peerauth.EncodeKey(old[0])}} {
		r := runCLI(t, "", env, "keyring", step[0], step[1])
		if r.code != 0 || !strings.Contains(r.stdout, "done on 2 members") {
			t.Fatalf("keyring %s: exit %d\n%s%s", step[0], r.code, r.stdout, r.stderr)
		}
	}
	r = runCLI(t, "", env, "keyring", "list")
	if r.code != 0 || strings.Count(r.stdout, fpNew) != 4 || strings.Contains(r.stdout, fpOld) {
		t.Errorf("list: exit %d, want both nodes on %s alone:\n%s%s", r.code, fpNew, r.stdout, r.stderr)
	}
	r = runCLI(t, "", env, "keyring", "install", "c2hvcnQ=")
	if r.code != exitUsage || !strings.Contains(r.stderr, "want 32") {
		t.Errorf("short key: exit %d, stderr %s", r.code, r.stderr)
	}
	r = runCLI(t, "", map[string]string{envAddr: c.Nodes[0].HTTPAddr()}, "keyring", "list")
	if r.code == 0 || !strings.Contains(r.stderr, "admin token") {
		t.Errorf("list without the token: exit %d, stderr %s", r.code, r.stderr)
	}
}

func mustKey(t *testing.T, s string) []byte {
	t.Helper()
	k, err := peerauth.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
