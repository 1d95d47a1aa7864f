package main

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base32"
	"encoding/pem"
	"fmt"
	"os"
	"strings"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/weirlimit/weir/internal/tlsconf"
)

// A browser opens the dashboard under mutual TLS only with a client
// certificate it can import, which means PKCS#12 (Go's standard library
// reads it nowhere and writes it not at all): `weir tls cert create
// --admin NAME --p12` writes DIR/admin-NAME.p12 beside the PEM files.

// p12Password returns the password from file (trailing newline trimmed),
// or a new random one when file is empty.
func p12Password(file string) (pw string, generated bool, err error) {
	if file == "" {
		b := make([]byte, 15)
		if _, err := rand.Read(b); err != nil {
			return "", false, err
		}
		return strings.ToLower(base32.StdEncoding.EncodeToString(b)), true, nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return "", false, err
	}
	pw = strings.TrimRight(string(raw), "\r\n")
	if pw == "" {
		return "", false, fmt.Errorf("%s is empty: a browser or key store refuses a PKCS#12 file without a password", file)
	}
	return pw, false, nil
}

// writeP12 bundles the certificate and key in certFile and keyFile, and
// the CA in caFile, into a PKCS#12 file at out (mode 0600), encrypted
// with password (AES-256, PBKDF2: what current browsers and OpenSSL 3 read).
func writeP12(out, certFile, keyFile, caFile, password string) error {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	var cas []*x509.Certificate
	for rest := caPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("%s: %w", caFile, err)
		}
		cas = append(cas, c)
	}
	data, err := pkcs12.Modern2023.Encode(pair.PrivateKey, leaf, cas, password)
	if err != nil {
		return err
	}
	return tlsconf.WriteFileAtomic(out, data, 0o600)
}
