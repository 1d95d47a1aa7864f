package rulesraft

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// With a hello check, an accepted connection yields nothing to Raft
// unless its peer opened with a valid hello: garbage, silence-then-close
// and a wrong hello are refused; the layer's own Dial passes.
func TestHelloRefusesStrangers(t *testing.T) {
	l, err := listenTCP("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.hello = func() []byte { return []byte("node-proof") }
	l.check = func(b []byte) (string, bool) { return "n1", string(b) == "node-proof" }
	refused := 0
	l.reject = func(net.Conn) { refused++ }
	accepted := make(chan net.Conn, 8)
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	addr := l.ln.Addr().String()
	for name, send := range map[string]func(net.Conn){
		"raft bytes, no hello": func(c net.Conn) { _, _ = c.Write([]byte{0, 1, 2, 3, 4, 5, 6, 7}) },
		"wrong hello":          func(c net.Conn) { _ = writeHello(c, []byte("guess"), time.Second) },
		"nothing":              func(c net.Conn) { _ = c.Close() },
		"oversized length":     func(c net.Conn) { _, _ = c.Write([]byte{0xff, 0xff, 'x'}) },
	} {
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		send(raw)
		c := <-accepted
		_, err = c.Read(make([]byte, 8))
		if !errors.Is(err, errHello) {
			t.Errorf("%s: Read = %v, want errHello", name, err)
		}
		_ = raw.Close()
	}
	if refused != 4 {
		t.Errorf("%d refusals logged, want 4", refused)
	}
	d, err := l.Dial(raft.ServerAddress(addr), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	c := <-accepted
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
		t.Fatalf("node's connection: %q, %v; want ping", b, err)
	}
}
