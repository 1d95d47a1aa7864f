package rulesraft

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// TLSHandshakeTimeout bounds the TLS handshake of one Raft connection.
const TLSHandshakeTimeout = 5 * time.Second

// tlsState is the TLS side of a tcpLayer (Config.ServerTLS/ClientTLS).
// Accepted connections are handshaken on a goroutine each (so a peer that
// never finishes cannot stall Raft's accept loop) by acceptLoop, which
// hands the ones that pass to Accept through ready.
type tlsState struct {
	server, client *tls.Config
	log            *slog.Logger
	ready          chan net.Conn
	done           chan struct{}
	wg             sync.WaitGroup // acceptLoop and the handshakes
	closeOnce      sync.Once
}

// useTLS turns l into a mutual TLS layer. Call once, before use.
func (l *tcpLayer) useTLS(server, client *tls.Config, log *slog.Logger) {
	t := &tlsState{server: server, client: client, log: log, ready: make(chan net.Conn), done: make(chan struct{})}
	l.tls = t
	t.wg.Add(1)
	go l.acceptLoop()
}

// acceptLoop accepts raw connections until the listener closes and
// handshakes each on its own goroutine.
func (l *tcpLayer) acceptLoop() {
	t := l.tls
	defer t.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		tc, err := l.track(tls.Server(c, t.server))
		if err != nil {
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), TLSHandshakeTimeout)
			defer cancel()
			stop := context.AfterFunc(l.dials, cancel) // Close aborts it
			defer stop()
			if err := tc.(*trackedConn).Conn.(*tls.Conn).HandshakeContext(ctx); err != nil {
				t.log.Warn("raft: refused a connection: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
				tc.Close()
				return
			}
			select {
			case t.ready <- tc:
			case <-t.done:
				tc.Close()
			}
		}()
	}
}

// acceptTLS is Accept for a TLS layer.
func (l *tcpLayer) acceptTLS() (net.Conn, error) {
	select {
	case c := <-l.tls.ready:
		return c, nil
	case <-l.tls.done:
		return nil, net.ErrClosed
	}
}

// dialTLS completes a client handshake on a dialled connection.
func (l *tcpLayer) dialTLS(c net.Conn, addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	tc := tls.Client(c, l.tls.client)
	ctx, cancel := context.WithTimeout(l.dials, timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("rules store: TLS handshake with %s: %w", addr, err)
	}
	return tc, nil
}

// closeTLS stops the accept loop and waits for it and the handshakes.
func (l *tcpLayer) closeTLS() {
	if l.tls == nil {
		return
	}
	l.tls.closeOnce.Do(func() { close(l.tls.done) })
	l.tls.wg.Wait()
}
