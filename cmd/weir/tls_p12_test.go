package main

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"software.sslmate.com/src/go-pkcs12"
)

// TestTLSCertP12: `weir tls cert create --admin NAME --p12` writes a
// PKCS#12 file that decodes, with the printed password, to the admin's
// own certificate and key and the cluster CA; bad input is a usage error
// and writes nothing.
func TestTLSCertP12(t *testing.T) {
	dir := t.TempDir()
	if r := runCLI(t, "", nil, "tls", "ca", "create", "--dir", dir, "--cluster", "prod"); r.code != exitOK {
		t.Fatalf("ca create: exit %d, stderr %q", r.code, r.stderr)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--node", "n1", "--p12"},                                              // nothing to bundle
		{"--admin", "ops", "--p12-password-file", empty},                       // a password without --p12
		{"--admin", "ops", "--p12", "--p12-password-file", empty},              // an empty password
		{"--admin", "ops", "--p12", "--p12-password-file", empty + ".missing"}, // no such file
	} {
		r := runCLI(t, "", nil, append([]string{"tls", "cert", "create", "--dir", dir}, args...)...)
		if r.code != exitUsage {
			t.Errorf("cert create %q: exit %d, stderr %q; want a usage error", args, r.code, r.stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("%d files after refused commands, want the CA's 2", len(entries))
	}

	check := func(name, password string) {
		t.Helper()
		p12 := filepath.Join(dir, "admin-"+name+".p12")
		st, err := os.Stat(p12)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v; want it written, mode 0600", p12, err, st)
		}
		data, _ := os.ReadFile(p12)
		key, leaf, cas, err := pkcs12.DecodeChain(data, password)
		if err != nil {
			t.Fatalf("decoding %s: %v", p12, err)
		}
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "admin-"+name+".pem"), filepath.Join(dir, "admin-"+name+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(leaf.Raw, pair.Certificate[0]) {
			t.Errorf("%s holds another certificate (%v) than admin-%s.pem", p12, leaf.URIs, name)
		}
		if k, ok := key.(interface{ Equal(crypto.PrivateKey) bool }); !ok || !k.Equal(pair.PrivateKey) {
			t.Errorf("%s holds another key than admin-%s-key.pem", p12, name)
		}
		ca, _ := tls.LoadX509KeyPair(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
		if len(cas) != 1 || !bytes.Equal(cas[0].Raw, ca.Certificate[0]) {
			t.Errorf("%s holds %d CA certificates, want ca.pem", p12, len(cas))
		}
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://prod/admin/"+name {
			t.Errorf("certificate names %v", leaf.URIs)
		}
		if _, _, _, err := pkcs12.DecodeChain(data, password+"x"); err == nil {
			t.Errorf("%s decodes with a wrong password", p12)
		}
	}

	// A new password, printed once.
	r := runCLI(t, "", nil, "tls", "cert", "create", "--dir", dir, "--admin", "ops", "--gateway", "gw", "--p12")
	if r.code != exitOK {
		t.Fatalf("cert create --p12: exit %d, stderr %q", r.code, r.stderr)
	}
	m := regexp.MustCompile(`the \.p12 password: (\S+)`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no password printed: %q", r.stdout)
	}
	check("ops", m[1])
	if _, err := os.Stat(filepath.Join(dir, "gateway-gw.p12")); err == nil {
		t.Error("a .p12 for a gateway: --p12 bundles admins' certificates only")
	}
	// The operator's own password, from a file.
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("correct horse\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "", nil, "tls", "cert", "create", "--dir", dir, "--admin", "alice", "--p12", "--p12-password-file", pwFile)
	if r.code != exitOK || strings.Contains(r.stdout, "password:") {
		t.Fatalf("cert create --p12-password-file: exit %d, stdout %q, stderr %q (the password is not printed)", r.code, r.stdout, r.stderr)
	}
	check("alice", "correct horse")
}

// dashboardWithP12 issues an admin .p12 from the CA in dir and opens the
// TLS node's dashboard at addr as a browser that imported it would: the
// page and its data (/v1/ops/snapshot) answer with the bundle's
// certificate; the data is refused without one.
func dashboardWithP12(t *testing.T, dir, addr string) {
	t.Helper()
	r := runCLI(t, "", nil, "tls", "cert", "create", "--dir", dir, "--admin", "browser", "--p12")
	m := regexp.MustCompile(`the \.p12 password: (\S+)`).FindStringSubmatch(r.stdout)
	if r.code != exitOK || m == nil {
		t.Fatalf("cert create --p12: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	data, err := os.ReadFile(filepath.Join(dir, "admin-browser.p12"))
	if err != nil {
		t.Fatal(err)
	}
	key, leaf, cas, err := pkcs12.DecodeChain(data, m[1])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	for _, c := range cas {
		roots.AddCert(c)
	}
	get := func(path string, certs []tls.Certificate) int {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs, ServerName: "localhost"}}}
		defer c.CloseIdleConnections()
		resp, err := c.Get("https://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	withCert := []tls.Certificate{{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}}
	for _, path := range []string{"/ui/", "/v1/ops/snapshot"} {
		if code := get(path, withCert); code != http.StatusOK {
			t.Errorf("GET %s with the .p12's certificate: %d, want 200", path, code)
		}
	}
	if code := get("/v1/ops/snapshot", nil); code == http.StatusOK {
		t.Errorf("GET /v1/ops/snapshot without a certificate: %d, want a refusal", code)
	}
}
