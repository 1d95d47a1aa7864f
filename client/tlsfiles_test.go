package client

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/tlsconf"
)

// TLSFromFiles builds a config a gateway reaches a mutual-TLS cluster
// with, from the files `weir tls` writes; bad files are a clear error.
func TestTLSFromFiles(t *testing.T) {
	c := testcluster.NewWith(t, 1, testcluster.Options{TLS: true})
	c.ApplyRules(testRules)
	f := c.PKI.Files(tlsconf.RoleGateway, "gw1", time.Hour)
	tc, err := TLSFromFiles(f.CA, f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	cl := newTestClient(t, c, "gw1", func(cfg *Config) { cfg.TLS = tc })
	if !cl.Ready() {
		t.Fatal("not ready over TLS")
	}
	if _, err := TLSFromFiles(filepath.Join(t.TempDir(), "none.pem"), f.Cert, f.Key); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
	if _, err := TLSFromFiles(f.CA, f.Cert, f.Cert); err == nil {
		t.Fatal("a certificate given as the key was accepted")
	}
}
