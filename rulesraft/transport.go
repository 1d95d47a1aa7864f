package rulesraft

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// tcpLayer is a raft.StreamLayer over plain TCP, like the one behind
// raft.NewTCPTransport, except that it keeps every connection it accepted or
// dialled and closes them all on Close. Raft's NetworkTransport.Close stops
// only the listener, which would leave one goroutine per inbound connection
// blocked in Read for as long as the peer keeps its end open. Dials in
// progress end at abortDials: Raft's Shutdown waits for its RPC goroutines,
// and a dial to an address that vanished (a member's container or pod
// gone) would otherwise hold it for the whole dial timeout.
type tcpLayer struct {
	ln  net.Listener
	adv net.Addr

	dials      context.Context
	abortDials context.CancelFunc

	tls *tlsState // nil: plain TCP

	hello  func() []byte               // Config.Hello
	check  func([]byte) (string, bool) // Config.CheckHello
	reject func(net.Conn)              // logs a refused connection

	rpc    *rpcCheck                                // nil: requests pass unchecked
	peerID func(tls.ConnectionState) (string, bool) // Config.PeerID

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

var _ raft.StreamLayer = (*tcpLayer)(nil)

// listenTCP listens on bind. The layer's Addr is advertise (port 0: the
// bound port), or the bound address when advertise is empty.
func listenTCP(bind, advertise string) (*tcpLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	var adv net.Addr = ln.Addr()
	if advertise != "" {
		host, port, err := net.SplitHostPort(advertise)
		if err != nil {
			ln.Close()
			return nil, err
		}
		if port == "0" {
			_, port, _ = net.SplitHostPort(ln.Addr().String())
		}
		adv = advAddr(net.JoinHostPort(host, port))
	}
	l := &tcpLayer{ln: ln, adv: adv, conns: make(map[net.Conn]struct{})}
	l.dials, l.abortDials = context.WithCancel(context.Background())
	return l, nil
}

// advAddr is an advertised address, possibly a host name, kept as given.
type advAddr string

func (a advAddr) Network() string { return "tcp" }
func (a advAddr) String() string  { return string(a) }

// peerAddrs adapts Config.PeerAddr to Raft's ServerAddressProvider (nil
// when f is nil: Raft dials the configured addresses).
func peerAddrs(f func(id string) (string, bool)) raft.ServerAddressProvider {
	if f == nil {
		return nil
	}
	return addrProvider(f)
}

type addrProvider func(id string) (string, bool)

// ServerAddr implements raft.ServerAddressProvider: an error makes Raft
// dial the configured address.
func (f addrProvider) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if a, ok := f(string(id)); ok && a != "" {
		return raft.ServerAddress(a), nil
	}
	return "", fmt.Errorf("rules store: no current address known for %s", id)
}

func (l *tcpLayer) track(c net.Conn) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[c] = struct{}{}
	return &trackedConn{Conn: c, l: l}, nil
}

// Accept implements net.Listener. With checks (rpcCheck), Raft reads an
// accepted connection's requests only once they passed.
func (l *tcpLayer) Accept() (net.Conn, error) {
	c, err := l.accept()
	if err != nil || l.rpc == nil {
		return c, err
	}
	return l.rpc.wrap(c, l.identity(c)), nil
}

func (l *tcpLayer) accept() (net.Conn, error) {
	if l.tls != nil {
		return l.acceptTLS()
	}
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	if l.check != nil {
		c = &helloConn{Conn: c, check: l.check, reject: l.reject}
	}
	return l.track(c)
}

// identity returns what tells the node an accepted connection proved it
// is: its certificate's (Config.PeerID) or its hello's; "" for none.
func (l *tcpLayer) identity(c net.Conn) func() string {
	none := func() string { return "" }
	tc, ok := c.(*trackedConn)
	if !ok {
		return none
	}
	switch inner := tc.Conn.(type) {
	case *tls.Conn:
		if l.peerID == nil {
			return none
		}
		id, ok := l.peerID(inner.ConnectionState())
		if !ok {
			id = "\x00no node identity" // names no server: every request is refused
		}
		return func() string { return id }
	case *helloConn:
		return func() string { return inner.id }
	}
	return none
}

// Dial implements raft.StreamLayer.
func (l *tcpLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(l.dials, "tcp", string(addr))
	if err != nil {
		return nil, fmt.Errorf("rules store: dial %s: %w", addr, err)
	}
	if l.tls != nil {
		if c, err = l.dialTLS(c, addr, timeout); err != nil {
			return nil, err
		}
	} else if l.hello != nil {
		if err := writeHello(c, l.hello(), timeout); err != nil {
			c.Close()
			return nil, fmt.Errorf("rules store: hello to %s: %w", addr, err)
		}
	}
	return l.track(c)
}

// Addr implements net.Listener: the address peers should dial.
func (l *tcpLayer) Addr() net.Addr { return l.adv }

// Close stops the listener and closes every open connection.
func (l *tcpLayer) Close() error {
	l.abortDials()
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	err := l.ln.Close()
	for c := range conns {
		c.Close()
	}
	l.closeTLS()
	return err
}

type trackedConn struct {
	net.Conn
	l    *tcpLayer
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c.Conn)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
