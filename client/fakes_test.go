package client

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// fakeClock is a Config.Now the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// link is a Config.Dial whose connections the test can cut: while cut,
// every byte either way is dropped and new connections are black holes
// too (a pulled cable: nothing fails, nothing arrives). Restore resets
// every connection opened so far (their streams lost bytes), so the
// client redials on a clean link.
type link struct {
	mu    sync.Mutex
	cut   bool
	conns map[*linkConn]struct{}
}

func newLink() *link { return &link{conns: map[*linkConn]struct{}{}} }

func (l *link) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	lc := &linkConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[lc] = struct{}{}
	l.mu.Unlock()
	return lc, nil
}

func (l *link) isCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
}

func (l *link) Cut() {
	l.mu.Lock()
	l.cut = true
	l.mu.Unlock()
}

// Restore closes every connection while still cut (so no byte from the
// outage leaks through), then lets traffic pass again.
func (l *link) Restore() {
	l.mu.Lock()
	conns := l.conns
	l.conns = map[*linkConn]struct{}{}
	l.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
	l.mu.Lock()
	l.cut = false
	l.mu.Unlock()
}

type linkConn struct {
	net.Conn
	l *link
}

func (c *linkConn) Write(b []byte) (int, error) {
	if c.l.isCut() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *linkConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || !c.l.isCut() {
			return n, err
		}
	}
}

func (c *linkConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// fallbackReasons sums weir_client_fallback_decisions_total by reason.
func fallbackReasons(t testing.TB, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "weir_client_fallback_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" {
					out[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// scrape reads one unlabelled counter or gauge from a node's /metrics.
func scrape(t testing.TB, httpAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, v, err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatal(fmt.Errorf("%s: no sample %s", httpAddr, name))
	return 0
}
