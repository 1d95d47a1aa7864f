package tlsconf

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// ErrIdentity reports a certificate that names no valid Weir identity.
var ErrIdentity = errors.New("no weir identity")

// Role is what a certificate's holder may do.
type Role string

// The roles.
const (
	RoleNode    Role = "node"
	RoleGateway Role = "gateway"
	RoleAdmin   Role = "admin"
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r == RoleNode || r == RoleGateway || r == RoleAdmin }

// Identity is who a caller is: spiffe://<Cluster>/<Role>/<Name>.
type Identity struct {
	Cluster string
	Role    Role
	Name    string
}

// URL is the identity's URI.
func (id Identity) URL() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: id.Cluster, Path: "/" + string(id.Role) + "/" + id.Name}
}

// String is the identity's URI.
func (id Identity) String() string { return id.URL().String() }

// Validate reports whether id is well formed.
func (id Identity) Validate() error {
	if !validPart(id.Cluster) {
		return fmt.Errorf("%w: cluster name %q: want letters, digits, '.', '-' or '_'", ErrIdentity, id.Cluster)
	}
	if !id.Role.Valid() {
		return fmt.Errorf("%w: role %q: want node, gateway or admin", ErrIdentity, id.Role)
	}
	if !validPart(id.Name) {
		return fmt.Errorf("%w: name %q: want letters, digits, '.', '-' or '_'", ErrIdentity, id.Name)
	}
	return nil
}

func validPart(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_'
		if !ok {
			return false
		}
	}
	return true
}

// ParseURI reads an identity from a spiffe URI.
func ParseURI(u *url.URL) (Identity, error) {
	if u == nil || u.Scheme != "spiffe" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return Identity{}, fmt.Errorf("%w: %v is not spiffe://<cluster>/<role>/<name>", ErrIdentity, u)
	}
	role, name, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	id := Identity{Cluster: u.Host, Role: Role(role), Name: name}
	if !ok {
		return Identity{}, fmt.Errorf("%w: %v is not spiffe://<cluster>/<role>/<name>", ErrIdentity, u)
	}
	if err := id.Validate(); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// FromCert reads the identity of a certificate: its one spiffe URI SAN.
func FromCert(c *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range c.URIs {
		if u.Scheme != "spiffe" {
			continue
		}
		id, err := ParseURI(u)
		if err != nil {
			return Identity{}, err
		}
		found = append(found, id)
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return Identity{}, fmt.Errorf("%w: certificate %q has no spiffe URI SAN", ErrIdentity, c.Subject.CommonName)
	default:
		return Identity{}, fmt.Errorf("%w: certificate %q has %d spiffe URI SANs; want one", ErrIdentity, c.Subject.CommonName, len(found))
	}
}

// FromContext is the identity of a gRPC caller that connected over TLS
// (its verified certificate); ok is false for any other caller.
func FromContext(ctx context.Context) (Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return Identity{}, false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return Identity{}, false
	}
	return FromPeerCerts(ti.State.PeerCertificates)
}

// FromPeerCerts is the identity of the leaf of a verified chain (the
// connection's tls.ConnectionState.PeerCertificates).
func FromPeerCerts(certs []*x509.Certificate) (Identity, bool) {
	if len(certs) == 0 {
		return Identity{}, false
	}
	id, err := FromCert(certs[0])
	return id, err == nil
}
