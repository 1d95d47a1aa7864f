package tlsconf

import (
	"crypto/tls"
	"log/slog"
	"net"

	"google.golang.org/grpc/credentials"
)

// ServerCredentials are gRPC server credentials over cfg that log every
// refused connection (plaintext, a foreign CA, an expired certificate)
// with the caller's address.
func ServerCredentials(cfg *tls.Config, log *slog.Logger) credentials.TransportCredentials {
	return logCreds{TransportCredentials: credentials.NewTLS(cfg), log: log}
}

type logCreds struct {
	credentials.TransportCredentials
	log *slog.Logger
}

func (c logCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	nc, ai, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil && c.log != nil {
		c.log.Warn("tls: refused a connection", "remote", conn.RemoteAddr().String(), "err", err)
	}
	return nc, ai, err
}

func (c logCreds) Clone() credentials.TransportCredentials {
	return logCreds{TransportCredentials: c.TransportCredentials.Clone(), log: c.log}
}

// ErrorLog adapts log for http.Server.ErrorLog, where net/http reports
// TLS handshake errors ("http: TLS handshake error from ...").
func ErrorLog(log *slog.Logger) *slogWriter { return &slogWriter{log: log} }

type slogWriter struct{ log *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	msg := string(p)
	for len(msg) > 0 && msg[len(msg)-1] == '\n' {
		msg = msg[:len(msg)-1]
	}
	w.log.Warn("http: " + msg)
	return len(p), nil
}
