package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that issues Weir certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM and KeyPEM are Cert and Key encoded.
	CertPEM, KeyPEM []byte
}

// CA and certificate file names inside a `weir tls` directory.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// CertFiles are the certificate and key file names of id in dir.
func CertFiles(dir string, id Identity) (cert, key string) {
	base := filepath.Join(dir, string(id.Role)+"-"+id.Name)
	return base + ".pem", base + "-key.pem"
}

// NewCA creates a CA for cluster, valid from now for validity.
func NewCA(cluster string, validity time.Duration) (*CA, error) {
	if !validPart(cluster) {
		return nil, fmt.Errorf("%w: cluster name %q: want letters, digits, '.', '-' or '_'", ErrConfig, cluster)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Weir CA " + cluster, Organization: []string{"weir"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: kp}, nil
}

// LoadCA reads dir/ca.pem and dir/ca-key.pem.
func LoadCA(dir string) (*CA, error) {
	cp, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, err
	}
	kp, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(cp)
	kb, _ := pem.Decode(kp)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%w: %s or %s is not PEM", ErrConfig, CAFile, CAKeyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, CAFile, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, CAKeyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s: not an ECDSA key", ErrConfig, CAKeyFile)
	}
	return &CA{Cert: cert, Key: key, CertPEM: cp, KeyPEM: kp}, nil
}

// Cluster is the cluster this CA was made for (from its name), or "".
func (ca *CA) Cluster() string {
	const p = "Weir CA "
	if cn := ca.Cert.Subject.CommonName; len(cn) > len(p) && cn[:len(p)] == p {
		return cn[len(p):]
	}
	return ""
}

// Issue makes a certificate for id, valid from notBefore to notAfter, for
// both server and client use. hosts (IPs or DNS names) are added as SANs
// for clients that verify host names (Weir itself does not).
func (ca *CA) Issue(id Identity, hosts []string, notBefore, notAfter time.Time) (certOut, keyOut []byte, err error) {
	if err := id.Validate(); err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: string(id.Role) + "." + id.Name, Organization: []string{"weir"}},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	tmpl.URIs = []*url.URL{id.URL()}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kp, nil
}

// WriteCA writes ca.pem and ca-key.pem into dir (created 0700), refusing
// to overwrite an existing CA.
func (ca *CA) WriteCA(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []string{CAFile, CAKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("%w: %s already exists; remove it first to make a new CA", ErrConfig, filepath.Join(dir, f))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, CAKeyFile), ca.KeyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, CAFile), ca.CertPEM, 0o644)
}

// WriteCert issues a certificate for id and writes it and its key into
// dir (CertFiles), replacing any earlier one atomically (a rename), so a
// running process reloads a whole file. It returns the two paths.
func (ca *CA) WriteCert(dir string, id Identity, hosts []string, validity time.Duration) (cert, key string, err error) {
	now := time.Now()
	cp, kp, err := ca.Issue(id, hosts, now.Add(-time.Minute), now.Add(validity))
	if err != nil {
		return "", "", err
	}
	cert, key = CertFiles(dir, id)
	if err := WriteFileAtomic(key, kp, 0o600); err != nil {
		return "", "", err
	}
	if err := WriteFileAtomic(cert, cp, 0o644); err != nil {
		return "", "", err
	}
	return cert, key, nil
}

// WriteFileAtomic writes data to path through a temporary file and a
// rename, so a process reloading path reads a whole file.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(errors.New("tlsconf: no randomness"))
	}
	return n
}
