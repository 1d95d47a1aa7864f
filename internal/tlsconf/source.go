package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrConfig reports unusable TLS files or options.
var ErrConfig = errors.New("TLS setup")

// ErrRefused reports a peer certificate this process does not accept.
var ErrRefused = errors.New("TLS certificate refused")

// Files names the PEM files of one process: its certificate (with any
// intermediates after it), its private key, and the cluster CA.
type Files struct {
	Cert, Key, CA string
}

// Set reports whether any file is named; Validate whether all three are.
func (f Files) Set() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Validate reports a partly configured set.
func (f Files) Validate() error {
	if f.Set() && (f.Cert == "" || f.Key == "" || f.CA == "") {
		return fmt.Errorf("%w: --tls-cert, --tls-key and --tls-ca go together (got cert %q, key %q, ca %q)", ErrConfig, f.Cert, f.Key, f.CA)
	}
	return nil
}

// ReloadEvery is how often, at most, a Source looks at its files.
const ReloadEvery = time.Second

// Source is the current certificate and CA of one process, read from
// Files and reloaded when they change (see the package doc).
type Source struct {
	files   Files
	cluster string
	log     *slog.Logger
	now     func() time.Time

	cur       atomic.Pointer[material]
	nextCheck atomic.Int64 // unix ns of the next look at the files

	mu    sync.Mutex // serializes reloads
	stamp [3]fileStamp
	pin   *Identity // set by Pin: every reload must name it
}

type material struct {
	cert *tls.Certificate
	id   Identity
	pool *x509.CertPool
}

type fileStamp struct {
	size int64
	mod  time.Time
}

// New loads files. cluster is the trust domain every peer's identity must
// name (empty: the one this process's certificate names); log receives
// reloads and refusals (nil: discarded).
func New(files Files, cluster string, log *slog.Logger) (*Source, error) {
	if err := files.Validate(); err != nil {
		return nil, err
	}
	if !files.Set() {
		return nil, fmt.Errorf("%w: no TLS files", ErrConfig)
	}
	if cluster != "" && !validPart(cluster) {
		return nil, fmt.Errorf("%w: cluster name %q: want letters, digits, '.', '-' or '_'", ErrConfig, cluster)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{files: files, cluster: cluster, log: log, now: time.Now}
	st, err := s.stamps()
	if err != nil {
		return nil, err
	}
	m, err := s.load()
	if err != nil {
		return nil, err
	}
	s.stamp = st
	s.cur.Store(m)
	s.nextCheck.Store(time.Now().Add(ReloadEvery).UnixNano())
	return s, nil
}

// Pin requires every certificate loaded from now on to name the current
// identity: a node's certificate must keep naming its --id.
func (s *Source) Pin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.cur.Load().id
	s.pin = &id
}

// Identity is the identity the current certificate names.
func (s *Source) Identity() Identity { return s.current().id }

// Cluster is the trust domain.
func (s *Source) Cluster() string { return s.cluster }

// Leaf is the current certificate.
func (s *Source) Leaf() *x509.Certificate { return s.current().cert.Leaf }

func (s *Source) stamps() ([3]fileStamp, error) {
	var out [3]fileStamp
	for i, p := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		fi, err := os.Stat(p)
		if err != nil {
			return out, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		out[i] = fileStamp{size: fi.Size(), mod: fi.ModTime()}
	}
	return out, nil
}

// load reads and checks the three files.
func (s *Source) load() (*material, error) {
	cert, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate %s / key %s: %v", ErrConfig, s.files.Cert, s.files.Key, err)
	}
	now := s.now()
	leaf := cert.Leaf
	if now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("%w: certificate %s expired at %s", ErrConfig, s.files.Cert, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return nil, fmt.Errorf("%w: certificate %s is not valid before %s", ErrConfig, s.files.Cert, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	id, err := FromCert(leaf)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate %s: %v", ErrConfig, s.files.Cert, err)
	}
	if s.cluster == "" {
		s.cluster = id.Cluster // New with no cluster: the certificate's
	}
	if id.Cluster != s.cluster {
		return nil, fmt.Errorf("%w: certificate %s names cluster %q, this process is in %q (--cluster-name)", ErrConfig, s.files.Cert, id.Cluster, s.cluster)
	}
	if s.pin != nil && id != *s.pin {
		return nil, fmt.Errorf("%w: certificate %s names %s; this process is %s", ErrConfig, s.files.Cert, id, *s.pin)
	}
	pemCA, err := os.ReadFile(s.files.CA)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		return nil, fmt.Errorf("%w: CA %s holds no PEM certificate", ErrConfig, s.files.CA)
	}
	inter := x509.NewCertPool()
	for _, raw := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(raw); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("%w: certificate %s does not verify against CA %s: %v", ErrConfig, s.files.Cert, s.files.CA, err)
	}
	return &material{cert: &cert, id: id, pool: pool}, nil
}

// current returns the material in use, reloading it first when the files
// changed (looked at no more than once per ReloadEvery).
func (s *Source) current() *material {
	now := time.Now().UnixNano()
	if next := s.nextCheck.Load(); now < next || !s.nextCheck.CompareAndSwap(next, now+int64(ReloadEvery)) {
		return s.cur.Load()
	}
	s.Reload()
	return s.cur.Load()
}

// Reload re-reads the files if they changed since they were last read.
// A set that does not load (e.g. an expired certificate, or a key that is
// not the certificate's) is refused with an error log line; the previous
// one stays in use. It reports whether new material is in use.
func (s *Source) Reload() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.stamps()
	if err != nil {
		s.log.Error("tls: cannot read the certificate files; keeping the current ones", "err", err)
		return false
	}
	if st == s.stamp {
		return false
	}
	m, err := s.load()
	if err != nil {
		s.log.Error("tls: refused the new certificate files; keeping the current ones", "err", err)
		return false
	}
	s.stamp = st
	s.cur.Store(m)
	s.log.Info("tls: reloaded certificate and CA", "identity", m.id.String(), "not_after", m.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return true
}

// ServerConfig requires TLS 1.3 and a client certificate from the cluster
// CA naming one of roles (any role when none is given).
func (s *Source) ServerConfig(roles ...Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAnyClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, err := s.verify(raw, x509.ExtKeyUsageClientAuth, roles)
			return err
		},
	}
}

// ServerConfigOptionalClient is ServerConfig for a listener that also
// answers callers without a certificate (the HTTP API, whose /healthz and
// /readyz serve load balancers and kubelets): a certificate, when given,
// must still be from the cluster CA and name one of roles, and the layer
// above refuses everything else to a caller without one.
func (s *Source) ServerConfigOptionalClient(roles ...Role) *tls.Config {
	c := s.ServerConfig(roles...)
	c.ClientAuth = tls.RequestClientCert
	verify := c.VerifyPeerCertificate
	c.VerifyPeerCertificate = func(raw [][]byte, chains [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return nil
		}
		return verify(raw, chains)
	}
	return c
}

// ClientConfig presents this process's certificate and requires TLS 1.3
// and a server certificate from the cluster CA naming one of roles (any
// role when none is given).
func (s *Source) ClientConfig(roles ...Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The identity is the spiffe URI, checked below, not a host name.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyPeerCertificate
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, err := s.verify(raw, x509.ExtKeyUsageServerAuth, roles)
			return err
		},
	}
}

// verify checks a peer's chain against the current CA, now, and its
// identity against the cluster and roles. Every refusal is logged.
func (s *Source) verify(raw [][]byte, usage x509.ExtKeyUsage, roles []Role) (Identity, error) {
	id, err := s.verifyChain(raw, usage, roles)
	if err != nil {
		s.log.Warn("tls: refused a peer certificate", "err", err)
	}
	return id, err
}

func (s *Source) verifyChain(raw [][]byte, usage x509.ExtKeyUsage, roles []Role) (Identity, error) {
	if len(raw) == 0 {
		return Identity{}, fmt.Errorf("%w: no certificate", ErrRefused)
	}
	certs := make([]*x509.Certificate, 0, len(raw))
	for _, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return Identity{}, fmt.Errorf("%w: unreadable certificate: %v", ErrRefused, err)
		}
		certs = append(certs, c)
	}
	leaf := certs[0]
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	now := s.now()
	_, err := leaf.Verify(x509.VerifyOptions{Roots: s.current().pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		var inv x509.CertificateInvalidError
		if errors.As(err, &inv) && inv.Reason == x509.Expired {
			if now.After(leaf.NotAfter) {
				return Identity{}, fmt.Errorf("%w: certificate %q (%v) expired at %s", ErrRefused, leaf.Subject.CommonName, leaf.URIs, leaf.NotAfter.UTC().Format(time.RFC3339))
			}
			return Identity{}, fmt.Errorf("%w: certificate %q (%v) is not valid before %s", ErrRefused, leaf.Subject.CommonName, leaf.URIs, leaf.NotBefore.UTC().Format(time.RFC3339))
		}
		var unk x509.UnknownAuthorityError
		if errors.As(err, &unk) {
			return Identity{}, fmt.Errorf("%w: certificate %q (%v) is not signed by this cluster's CA (issuer %q)", ErrRefused, leaf.Subject.CommonName, leaf.URIs, leaf.Issuer.CommonName)
		}
		return Identity{}, fmt.Errorf("%w: certificate %q: %v", ErrRefused, leaf.Subject.CommonName, err)
	}
	id, err := FromCert(leaf)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if s.cluster == "" {
		s.cluster = id.Cluster // New with no cluster: the certificate's
	}
	if id.Cluster != s.cluster {
		return Identity{}, fmt.Errorf("%w: %s names cluster %q, not %q", ErrRefused, id, id.Cluster, s.cluster)
	}
	if len(roles) > 0 && !slices.Contains(roles, id.Role) {
		return Identity{}, fmt.Errorf("%w: %s: role %s may not connect here (want %v)", ErrRefused, id, id.Role, roles)
	}
	return id, nil
}
