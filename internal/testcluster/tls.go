package testcluster

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/node"
)

// PKI is a cluster CA for a test, with certificate files in a temporary
// directory.
type PKI struct {
	T       testing.TB
	Dir     string
	Cluster string
	CA      *tlsconf.CA
}

// NewPKI makes a CA for cluster (its files in a temporary directory).
func NewPKI(t testing.TB, cluster string) *PKI {
	t.Helper()
	ca, err := tlsconf.NewCA(cluster, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{T: t, Dir: t.TempDir(), Cluster: cluster, CA: ca}
	if err := ca.WriteCA(p.Dir); err != nil {
		t.Fatal(err)
	}
	return p
}

// Files issues a certificate for role/name valid for validity from now
// (written over any earlier one) and returns the files naming it.
func (p *PKI) Files(role tlsconf.Role, name string, validity time.Duration) tlsconf.Files {
	p.T.Helper()
	id := tlsconf.Identity{Cluster: p.Cluster, Role: role, Name: name}
	cert, key, err := p.CA.WriteCert(p.Dir, id, []string{"127.0.0.1"}, validity)
	if err != nil {
		p.T.Fatal(err)
	}
	return tlsconf.Files{Cert: cert, Key: key, CA: p.Dir + "/" + tlsconf.CAFile}
}

// Source loads the files of role/name (issuing them if needed).
func (p *PKI) Source(role tlsconf.Role, name string) *tlsconf.Source {
	p.T.Helper()
	files := p.Files(role, name, time.Hour)
	src, err := tlsconf.New(files, p.Cluster, nil)
	if err != nil {
		p.T.Fatal(err)
	}
	return src
}

// ClientTLS is a client config presenting a fresh certificate for
// role/name.
func (p *PKI) ClientTLS(role tlsconf.Role, name string) *tls.Config {
	p.T.Helper()
	return p.Source(role, name).ClientConfig()
}

// HTTPClient is an HTTPS client presenting a certificate for role/name.
func (p *PKI) HTTPClient(role tlsconf.Role, name string) *http.Client {
	p.T.Helper()
	tr := &http.Transport{TLSClientConfig: p.ClientTLS(role, name)}
	p.T.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// Options choose how a test cluster runs.
type Options struct {
	// TLS: every node gets a node certificate from a fresh CA (Cluster.PKI).
	TLS bool
	// Faults: peer links run through Cluster.Faults (NewWithFaults).
	Faults bool
	// Config, when set, adjusts each node's config before it starts.
	Config func(*node.Config)
}

// NewWith starts n nodes with opts, as New does.
func NewWith(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	var f *Faults
	if opts.Faults {
		f = NewFaults()
	}
	c := &Cluster{T: t, Faults: f, opts: opts}
	if opts.TLS {
		c.PKI = NewPKI(t, Name)
	}
	t.Cleanup(c.Close)
	for i := 0; i < n; i++ {
		cfg := c.config(fmt.Sprintf("n%d", i+1))
		cfg.BootstrapExpect = n
		if i > 0 {
			cfg.Join = []string{c.Nodes[0].GossipAddr()}
		}
		c.Start(cfg)
	}
	c.seq = n
	c.WaitStable(n)
	return c
}

// config is Config with the cluster's options applied.
func (c *Cluster) config(id string) node.Config {
	cfg := Config(c.T, id)
	if c.PKI != nil {
		cfg.ClusterName = c.PKI.Cluster
		cfg.TLS = c.PKI.Files(tlsconf.RoleNode, id, time.Hour)
	}
	if c.opts.Config != nil {
		c.opts.Config(&cfg)
	}
	return cfg
}

// httpClient is the client ApplyRules writes with: an admin certificate
// under TLS.
func (c *Cluster) httpClient() (*http.Client, string) {
	if c.PKI == nil {
		return http.DefaultClient, "http://"
	}
	if c.admin == nil {
		c.admin = c.PKI.HTTPClient(tlsconf.RoleAdmin, "test")
	}
	return c.admin, "https://"
}

// RotateCA makes a new CA and writes the old and the new one together
// into the CA file, so both are trusted while certificates move to the new
// one; later certificates (Files) come from the new CA.
func (p *PKI) RotateCA() {
	p.T.Helper()
	ca, err := tlsconf.NewCA(p.Cluster, 24*time.Hour)
	if err != nil {
		p.T.Fatal(err)
	}
	bundle := append(append([]byte{}, p.CA.CertPEM...), ca.CertPEM...)
	if err := tlsconf.WriteFileAtomic(p.Dir+"/"+tlsconf.CAFile, bundle, 0o644); err != nil {
		p.T.Fatal(err)
	}
	p.CA = ca
}
