package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirlimit/weir/internal/testcluster"
)

// Errors users read name what went wrong, not the Go package that noticed
// it ("tlsconf: invalid config: ...", "rulesraft: ...").
func TestErrorsNameNoInternalPackage(t *testing.T) {
	dir := t.TempDir()
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "raft"), nil, 0o600); err != nil { // not a directory
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"tls", "cert", "create", "--dir", dir, "--node", "n1"}, "loading the CA"},
		{[]string{"status", "--addr", "https://127.0.0.1:1", "--tls-cert", missing, "--tls-key", missing, "--tls-ca", missing}, "missing.pem"},
		{[]string{"node", "--id", "n1", "--data-dir", dataDir, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
			"--raft", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--bootstrap-expect", "1"}, "raft data dir"},
		{[]string{"node", "--id", "n1", "--data-dir", t.TempDir(), "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
			"--raft", "127.0.0.1:0", "--gossip", "127.0.0.1:0", "--bootstrap-expect", "1",
			"--region", "eu", "--peer-regions", "eu=127.0.0.1:1"}, "invalid regions setup: region \"eu\" lists itself as a peer"},
		{[]string{"node", "--data-dir", t.TempDir(), "--region", "eu", "--peer-regions", "us"}, "invalid regions setup"},
	}
	for _, tc := range tests {
		r := runCLI(t, "", nil, tc.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("weir %s: exit %d, stderr %q; want an error with %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
			continue
		}
		for _, pkg := range []string{"tlsconf", "rulesraft", "region:", "share:", "replication:", "persist:"} {
			if strings.Contains(r.stderr, pkg) {
				t.Errorf("weir %s: %q names the package %s", strings.Join(tc.args, " "), r.stderr, pkg)
			}
		}
	}
}

// --addr given a node's other port says which port it likely is, instead
// of printing HTTP/2 frames as a "malformed HTTP response".
func TestWrongPortNamesTheMistake(t *testing.T) {
	c := testcluster.New(t, 1)
	n := c.Live()[0]
	r := runCLI(t, "", nil, "members", "--addr", n.GRPCAddr(), "--timeout", "10s")
	if r.code == 0 || !strings.Contains(r.stderr, "likely the node's gRPC port") || strings.Contains(r.stderr, `\x00`) {
		t.Errorf("members --addr <gRPC port>: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, "", nil, "health", "--addr", n.HTTPAddr())
	if r.code == 0 || !strings.Contains(r.stderr, "likely a node's HTTP port") {
		t.Errorf("health --addr <HTTP port>: exit %d, stderr %q", r.code, r.stderr)
	}
}
