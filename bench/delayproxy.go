package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// DelayProxy forwards TCP connections from a loopback listener to a
// target, delaying every byte by Delay in each direction (latency, not a
// bandwidth limit: chunks are pipelined). The regions scenario puts one in
// front of each region's address for the other regions, so their
// exchanges pay a cross-region round trip of 2×Delay.
type DelayProxy struct {
	Addr   string
	Delay  time.Duration
	target string
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

// StartDelayProxy listens on a free loopback port and forwards to target.
func StartDelayProxy(target string, delay time.Duration) (*DelayProxy, error) {
	if delay < 0 {
		return nil, fmt.Errorf("%w: negative delay %v", ErrInput, delay)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSpawn, err)
	}
	p := &DelayProxy{Addr: ln.Addr().String(), Delay: delay, target: target, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *DelayProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(in, out) {
			return
		}
		p.wg.Add(2)
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

// track remembers a connection pair to close it on Close; false if closed.
func (p *DelayProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

type chunk struct {
	at   time.Time
	data []byte
}

// pipe copies src to dst, each chunk written Delay after it was read.
func (p *DelayProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			time.Sleep(time.Until(c.at))
			if _, err := dst.Write(c.data); err != nil {
				_ = src.Close() // stops the reader
				for range q {
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{at: time.Now().Add(p.Delay), data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
	_ = dst.Close()
	_ = src.Close()
}

// Close stops the listener and every forwarded connection, and waits for
// the proxy's goroutines.
func (p *DelayProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

var _ io.Closer = (*DelayProxy)(nil)
