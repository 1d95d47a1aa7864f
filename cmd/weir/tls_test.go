package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/testlog"
	"github.com/weirlimit/weir/internal/testwait"
)

// TestTLSCommands: `weir tls ca create` and `weir tls cert create` write
// the PEM files; bad input is a usage error and writes nothing.
func TestTLSCommands(t *testing.T) {
	dir := t.TempDir()
	if r := runCLI(t, "", nil, "tls", "cert", "create", "--dir", dir, "--node", "n1"); r.code != exitError || !strings.Contains(r.stderr, "weir tls ca create") {
		t.Fatalf("cert before a CA: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI(t, "", nil, "tls", "ca", "create", "--dir", dir, "--cluster", "prod"); r.code != exitOK {
		t.Fatalf("ca create: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if r := runCLI(t, "", nil, "tls", "ca", "create", "--dir", dir); r.code != exitError || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("second ca create: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := runCLI(t, "", nil, "tls", "ca", "create", "--dir", dir, "--if-missing"); r.code != exitOK || !strings.Contains(r.stdout, "kept") {
		t.Errorf("ca create --if-missing over a CA: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{},
		{"--node", "bad/id"},
		{"--node", "n1,bad/id"}, // nothing written: every name is checked first
	} {
		r := runCLI(t, "", nil, append([]string{"tls", "cert", "create", "--dir", dir}, args...)...)
		if r.code != exitUsage {
			t.Errorf("cert create %q: exit %d, stderr %q; want a usage error", args, r.code, r.stderr)
		}
	}
	r := runCLI(t, "", nil, "tls", "cert", "create", "--dir", dir, "--node", "n1")
	if r.code != exitOK || !strings.Contains(r.stdout, "spiffe://prod/node/n1") {
		t.Fatalf("cert create: exit %d, stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, f := range []string{"node-n1.pem", "node-n1-key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 5 {
		t.Errorf("%d files in the directory, want 5 (no leftovers from refused commands)", len(entries))
	}
	keyring := filepath.Join(dir, "gossip-keyring")
	first, err := os.ReadFile(keyring)
	if st, serr := os.Stat(keyring); err != nil || serr != nil || st.Mode().Perm() != 0o600 || !strings.Contains(r.stdout, "--gossip-key-file "+keyring) {
		t.Fatalf("cert create --node: gossip keyring %v %v (stdout %q); want it written, mode 0600", err, serr, r.stdout)
	}
	if _, err := peerauth.ReadKeyringFile(keyring); err != nil {
		t.Fatal(err)
	}
	// A whole set in one run (what a one-shot container does).
	r = runCLI(t, "", nil, "tls", "cert", "create", "--dir", dir, "--node", "n2,n3", "--gateway", "gw", "--admin", "ops")
	if r.code != exitOK {
		t.Fatalf("cert create of a set: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, f := range []string{"node-n2.pem", "node-n3-key.pem", "gateway-gw.pem", "admin-ops-key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if again, _ := os.ReadFile(keyring); string(again) != string(first) || !strings.Contains(r.stdout, "kept the gossip keyring") {
		t.Errorf("a second cert create replaced the gossip keyring (stdout %q)", r.stdout)
	}
	// A TLS node told to gossip beyond loopback without the key refuses
	// to start and says how to make one.
	r = runCLI(t, "", nil, "node", "--id", "n1", "--data-dir", t.TempDir(), "--cluster-name", "prod",
		"--tls-cert", filepath.Join(dir, "node-n1.pem"), "--tls-key", filepath.Join(dir, "node-n1-key.pem"), "--tls-ca", filepath.Join(dir, "ca.pem"),
		"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--raft", "127.0.0.1:0", "--gossip", "0.0.0.0:0")
	if r.code == exitOK || !strings.Contains(r.stderr, "needs a gossip key") || !strings.Contains(r.stderr, "weir keyring generate") {
		t.Errorf("TLS node gossiping on 0.0.0.0 without a key: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestDevTLS runs `weir dev --tls` in-process: the admin commands work with
// the printed admin certificate and fail without it, `weir health` answers
// over TLS, and the dev gateway checks with the node over TLS.
func TestDevTLS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut testlog.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--tls", "--data-dir", t.TempDir(), "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--raft", "127.0.0.1:0",
			"--gossip", "127.0.0.1:0", "--gateway", "127.0.0.1:0", "--log-level", "error"},
			strings.NewReader(""), &out, &errOut, func(string) string { return "" })
	}()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("weir dev exited %d; stderr:\n%s", code, errOut.String())
		}
	}()
	re := regexp.MustCompile(`(?s)HTTPS https://(\S+)\s+gRPC (\S+).*export WEIR_TLS_CERT=(\S+) WEIR_TLS_KEY=(\S+) WEIR_TLS_CA=(\S+).*Gateway (http://\S+)`)
	var m []string
	testwait.For(t, 60*time.Second, "weir dev --tls to print its help", func() error {
		if m = re.FindStringSubmatch(out.String()); m != nil {
			return nil
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("weir dev exited %d early; stderr:\n%s", code, errOut.String())
		default:
		}
		return errors.New("not yet")
	})
	httpAddr, grpcAddr, gw := m[1], m[2], m[6]
	env := map[string]string{"WEIR_TLS_CERT": m[3], "WEIR_TLS_KEY": m[4], "WEIR_TLS_CA": m[5]}
	if r := runCLI(t, "", env, "rules", "list", "--addr", httpAddr); r.code != exitOK || !strings.Contains(r.stdout, "login.ip") {
		t.Errorf("rules list with the admin certificate: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// weir dev --tls gossips with a key, which the admin certificate lists.
	if r := runCLI(t, "", env, "keyring", "list", "--addr", httpAddr); r.code != exitOK || !regexp.MustCompile(`\n\S+\s+[0-9a-f]{16}\s`).MatchString(r.stdout) {
		t.Errorf("keyring list with the admin certificate: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", nil, "rules", "list", "--addr", httpAddr, "--timeout", "3s"); r.code == exitOK {
		t.Errorf("rules list without a certificate succeeded: %q", r.stdout)
	}
	// grpc.health turns SERVING within 100 ms of the node being ready.
	testwait.For(t, 10*time.Second, "health over TLS", func() error {
		if r := runCLI(t, "", env, "health", "--addr", grpcAddr); r.code != exitOK || !strings.Contains(r.stdout, "SERVING") {
			return fmt.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		return nil
	})
	if r := runCLI(t, "", nil, "health", "--addr", grpcAddr, "--timeout", "2s"); r.code == exitOK {
		t.Errorf("plaintext health succeeded against a TLS node")
	}
	resp, err := http.Get(gw + "/v1/search")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Remaining") == "" {
		t.Errorf("dev gateway: %d, X-RateLimit-Remaining %q; want 200 decided by the node", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
	// What a browser does with `--p12`: the dashboard's data answers the
	// PKCS#12 bundle's certificate, and not a client without one.
	dashboardWithP12(t, filepath.Dir(m[5]), httpAddr)
}

// In a git work tree that does not ignore --dir, `weir tls ca create`
// refuses to write the CA key (one `git add -A` from a commit) unless
// --force; an ignored directory, or one outside any work tree, is fine.
func TestTLSCACreateRefusesAnUnignoredDirInGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	dir := filepath.Join(repo, "tls")
	r := runCLI(t, "", nil, "tls", "ca", "create", "--dir", dir)
	if r.code != exitUsage || !strings.Contains(r.stderr, "git add -A") || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("ca create in an unignored dir: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca-key.pem")); !os.IsNotExist(err) {
		t.Fatalf("the refused command wrote the key: %v", err)
	}
	if r := runCLI(t, "", nil, "tls", "ca", "create", "--dir", dir, "--force"); r.code != exitOK {
		t.Fatalf("ca create --force: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(repo, ".gitignore"), []byte("/ignored/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "", nil, "tls", "ca", "create", "--dir", filepath.Join(repo, "ignored")); r.code != exitOK {
		t.Fatalf("ca create in an ignored dir: exit %d, stderr %q", r.code, r.stderr)
	}
}
