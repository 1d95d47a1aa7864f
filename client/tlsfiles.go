package client

import (
	"crypto/tls"

	"github.com/weirlimit/weir/internal/tlsconf"
)

// TLSFromFiles returns a Config.TLS for a cluster with mutual TLS, from
// PEM files: caFile is the cluster CA (ca.pem), certFile and keyFile this
// gateway's certificate and key (`weir tls cert create --gateway NAME`).
// It is what `weir gateway --tls-ca --tls-cert --tls-key` uses: TLS 1.3,
// each node's certificate checked against the CA and by the Weir identity
// it names (spiffe://<cluster>/...), not by host name. The files are read
// again when they change, so renewed certificates take effect without a
// restart. Unreadable, mismatched or expired files are an error here.
func TLSFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	src, err := tlsconf.New(tlsconf.Files{Cert: certFile, Key: keyFile, CA: caFile}, "", nil)
	if err != nil {
		return nil, err
	}
	return src.ClientConfig(), nil
}
