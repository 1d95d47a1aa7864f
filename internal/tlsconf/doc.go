// Package tlsconf is Weir's mutual TLS: who a certificate names, the
// certificate and CA files a process loads (and reloads when they change),
// the tls.Configs built from them, and the small CA behind `weir tls`.
//
// Identities. Every certificate Weir issues carries one URI SAN,
// spiffe://<cluster>/<role>/<name>, with role node, gateway or admin
// (Identity, ParseURI). A peer is accepted only if its chain verifies
// against the cluster CA, it is valid now, and its URI names this cluster
// and a role the listener or dialer allows. Host names are not checked:
// the identity is the URI, as in SPIFFE, so certificates need no IP SANs
// for nodes that move.
//
// Reloading. A Source holds the current certificate, key and CA pool. It
// re-reads its files (at most once per ReloadEvery, on the next handshake
// that needs them) when their size or modification time changed, so a
// rotated certificate or CA takes effect without a restart; connections
// already open keep the session they made. A new certificate that is
// expired, not yet valid, or does not match its key is refused with an
// error log line and the previous one stays in use. No goroutine: the
// reload runs on the handshake that notices the change, under Source.mu.
//
// Configs. Every config requires TLS 1.3. A server requires a client
// certificate (ServerConfig); a client presents its own and verifies the
// server's (ClientConfig). Refusals are logged by the Source (a peer's
// certificate: the reason, e.g. expired or signed by another CA) and by
// the listeners (plaintext: LogCredentials for gRPC, ErrorLog for HTTP).
//
// Files (`weir tls`, gen.go): ca.pem and ca-key.pem; <role>-<name>.pem
// and <role>-<name>-key.pem. ECDSA P-256 keys, PKCS#8 PEM.
package tlsconf
