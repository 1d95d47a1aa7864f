package rulesraft

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// The Raft connection handshake (Config.Hello, Config.CheckHello): the
// dialler writes a hello first, a 2-byte big-endian length and the bytes;
// the acceptor reads and checks it before Raft reads anything, and closes
// the connection when it fails. The check runs on the connection's own
// goroutine (Raft's handler), never in Accept, so a client that sends
// nothing holds no one else up.

// maxHello bounds a hello's length.
const maxHello = 1024

// errHello is returned by the first Read of a connection whose hello
// failed.
var errHello = errors.New("rules store: connection refused: no valid hello (not a node of this cluster)")

// writeHello sends hello on c within timeout.
func writeHello(c net.Conn, hello []byte, timeout time.Duration) error {
	if len(hello) > maxHello {
		return errors.New("rules store: hello too long")
	}
	b := make([]byte, 2+len(hello))
	binary.BigEndian.PutUint16(b, uint16(len(hello)))
	copy(b[2:], hello)
	if timeout > 0 {
		_ = c.SetWriteDeadline(time.Now().Add(timeout))
		defer c.SetWriteDeadline(time.Time{})
	}
	_, err := c.Write(b)
	return err
}

// helloConn checks the peer's hello on its first Read.
type helloConn struct {
	net.Conn
	check  func([]byte) (string, bool)
	reject func(net.Conn)
	once   sync.Once
	id     string // the node the hello proved, once read
	err    error
}

// helloTimeout bounds how long an accepted connection may take to say
// hello.
const helloTimeout = 10 * time.Second

func (c *helloConn) Read(p []byte) (int, error) {
	c.once.Do(func() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(helloTimeout))
		var n [2]byte
		if _, err := io.ReadFull(c.Conn, n[:]); err != nil {
			c.err = errHello
		} else if l := binary.BigEndian.Uint16(n[:]); l > maxHello {
			c.err = errHello
		} else {
			b := make([]byte, l)
			if _, err := io.ReadFull(c.Conn, b); err != nil {
				c.err = errHello
			} else if id, ok := c.check(b); !ok {
				c.err = errHello
			} else {
				c.id = id
			}
		}
		_ = c.Conn.SetReadDeadline(time.Time{})
		if c.err != nil {
			if c.reject != nil {
				c.reject(c.Conn)
			}
			_ = c.Conn.Close()
		}
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(p)
}
