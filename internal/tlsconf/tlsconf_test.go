package tlsconf

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseURI(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Identity
		ok   bool
	}{
		{"spiffe://weir/node/n1", Identity{"weir", RoleNode, "n1"}, true},
		{"spiffe://prod.eu/gateway/gw-1", Identity{"prod.eu", RoleGateway, "gw-1"}, true},
		{"spiffe://weir/admin/alice", Identity{"weir", RoleAdmin, "alice"}, true},
		{"spiffe://weir/root/alice", Identity{}, false},
		{"spiffe://weir/node", Identity{}, false},
		{"spiffe://weir/node/a/b", Identity{}, false},
		{"https://weir/node/n1", Identity{}, false},
		{"spiffe:///node/n1", Identity{}, false},
		{"spiffe://weir/node/n1?x=1", Identity{}, false},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseURI(u)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseURI(%s) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("String() = %s, want %s", got, tc.in)
		}
	}
}

// pki writes a CA and certificates into a temporary directory.
type pki struct {
	t   *testing.T
	dir string
	ca  *CA
}

func newPKI(t *testing.T, cluster string) *pki {
	ca, err := NewCA(cluster, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{t: t, dir: t.TempDir(), ca: ca}
	if err := ca.WriteCA(p.dir); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pki) files(role Role, name string, validity time.Duration) Files {
	cert, key, err := p.ca.WriteCert(p.dir, Identity{p.ca.Cluster(), role, name}, nil, validity)
	if err != nil {
		p.t.Fatal(err)
	}
	return Files{Cert: cert, Key: key, CA: filepath.Join(p.dir, CAFile)}
}

func (p *pki) source(role Role, name string) *Source {
	s, err := New(p.files(role, name, time.Hour), p.ca.Cluster(), nil)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// handshake runs a TLS handshake between a client and a server config
// over loopback and returns both sides' errors.
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = tc.HandshakeContext(ctx)
		if err == nil {
			_, err = tc.Write([]byte{1})
		}
		errc <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	return <-errc, err
}

func TestMutualTLS(t *testing.T) {
	p := newPKI(t, "weir")
	node := p.source(RoleNode, "n1")
	gw := p.source(RoleGateway, "g1")
	if s, c := handshake(t, node.ServerConfig(), gw.ClientConfig(RoleNode)); s != nil || c != nil {
		t.Fatalf("gateway → node: server %v, client %v", s, c)
	}
	// A listener for nodes only refuses a gateway.
	if s, _ := handshake(t, node.ServerConfig(RoleNode), gw.ClientConfig()); !errors.Is(s, ErrRefused) {
		t.Errorf("gateway → node-only listener: server %v, want ErrRefused", s)
	}
	// A client that wants a node refuses a gateway's server certificate.
	if _, c := handshake(t, gw.ServerConfig(), node.ClientConfig(RoleNode)); !errors.Is(c, ErrRefused) {
		t.Errorf("node → gateway-as-server: client %v, want ErrRefused", c)
	}
	// Another CA, or another cluster's CA, is refused.
	for _, other := range []*pki{newPKI(t, "weir"), newPKI(t, "other")} {
		o := other.source(RoleNode, "n1")
		trusting := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, GetClientCertificate: o.ClientConfig().GetClientCertificate}
		if s, _ := handshake(t, node.ServerConfig(), trusting); !errors.Is(s, ErrRefused) {
			t.Errorf("foreign CA (%s) → node: server %v, want ErrRefused", other.ca.Cluster(), s)
		}
	}
	// No client certificate.
	if s, _ := handshake(t, node.ServerConfig(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}); s == nil {
		t.Error("a client without a certificate was accepted")
	}
	// TLS 1.2 only.
	if s, _ := handshake(t, node.ServerConfig(), &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, GetClientCertificate: gw.ClientConfig().GetClientCertificate}); s == nil {
		t.Error("TLS 1.2 was accepted")
	}
}

func TestReload(t *testing.T) {
	p := newPKI(t, "weir")
	files := p.files(RoleNode, "n1", time.Hour)
	s, err := New(files, "weir", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Pin()
	first := s.Leaf().SerialNumber
	// A renewed certificate is picked up.
	p.files(RoleNode, "n1", time.Hour)
	if !s.Reload() || s.Leaf().SerialNumber.Cmp(first) == 0 {
		t.Fatal("renewed certificate not loaded")
	}
	second := s.Leaf().SerialNumber
	if s.Reload() {
		t.Error("Reload with unchanged files reported new material")
	}
	// An expired one, or one naming another node (pinned), is refused and
	// the current one kept.
	p.files(RoleNode, "n1", -time.Minute)
	if s.Reload() || s.Leaf().SerialNumber.Cmp(second) != 0 {
		t.Error("an expired certificate was loaded")
	}
	other := p.files(RoleNode, "n2", time.Hour)
	if err := WriteFileAtomic(files.Cert, mustRead(t, other.Cert), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(files.Key, mustRead(t, other.Key), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.Reload() || s.Identity().Name != "n1" {
		t.Errorf("a certificate for another node was loaded: %s", s.Identity())
	}
	// New refuses an expired certificate with a clear error.
	if _, err := New(p.files(RoleGateway, "old", -time.Minute), "weir", nil); err == nil || !errors.Is(err, ErrConfig) {
		t.Errorf("New with an expired certificate: %v", err)
	}
	if _, err := New(Files{Cert: files.Cert}, "weir", nil); !errors.Is(err, ErrConfig) {
		t.Errorf("New with a cert only: %v", err)
	}
	if _, err := New(p.files(RoleNode, "n3", time.Hour), "prod", nil); !errors.Is(err, ErrConfig) {
		t.Errorf("New for another cluster: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
