package bench

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestDelayProxy: bytes pass through intact and in order, a round trip
// through the proxy costs at least twice its delay, and Close ends the
// forwarded connections.
func TestDelayProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // echo
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	if _, err := StartDelayProxy(ln.Addr().String(), -time.Millisecond); !errors.Is(err, ErrInput) {
		t.Fatalf("negative delay: err = %v, want ErrInput", err)
	}
	const delay = 20 * time.Millisecond
	p, err := StartDelayProxy(ln.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte("weir "), 20_000) // several chunks
	start := time.Now()
	go func() { _, _ = c.Write(msg) }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 2*delay {
		t.Errorf("round trip %v through a %v proxy, want ≥ %v", rtt, delay, 2*delay)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("echoed bytes differ")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection still open after Close")
	}
}
