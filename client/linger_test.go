package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/proto/weirv1"
)

// lingerRules has one exact rule (no leases: every check asks the owner)
// that never denies.
const lingerRules = `
rules:
  - id: wide
    match: {route: /w}
    key: apikey
    rate: 1000000000
    period: 1s
    lease: off
    timeout: 10s
`

func lingerClient(t *testing.T, linger time.Duration) *Client {
	t.Helper()
	c := testcluster.New(t, 1)
	v := c.ApplyRules(lingerRules)
	cl := newTestClient(t, c, "gw1", func(cfg *Config) { cfg.Linger, cfg.Registry = linger, prometheus.NewRegistry() })
	testwait.For(t, 10*time.Second, "the client ready", func() error {
		if cl.RulesVersion() < v || cl.view.Load() == nil {
			return fmt.Errorf("client not ready")
		}
		return nil
	})
	return cl
}

// TestLingerLoneCallerNeverWaits: a caller alone never waits for others,
// however long Linger is (an hour here: a wait would hang the test).
func TestLingerLoneCallerNeverWaits(t *testing.T) {
	cl := lingerClient(t, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s0 := cl.Stats()
	for i := range 50 {
		d, err := cl.CheckKey(ctx, "apikey:lone", 1, "wide")
		if err != nil || !d.Allowed || d.Limits[0].Fallback {
			t.Fatalf("check %d: %+v %v", i, d, err)
		}
	}
	if s := cl.Stats(); s.RPCs-s0.RPCs != 50 {
		t.Errorf("50 checks one after another took %d requests, want 50", s.RPCs-s0.RPCs)
	}
}

// lingerConn is a node connection's queue and config alone: enough for
// linger, which only reads them.
func lingerConn(linger time.Duration) *nodeConn {
	c := &Client{cfg: DefaultConfig()}
	c.cfg.Linger = linger
	return &nodeConn{queue: make(chan *call, 16), c: c}
}

// lingerAsync runs linger for want calls, one already in the batch, and
// returns what it gathered on a channel.
func lingerAsync(n *nodeConn, want int) <-chan []*call {
	out := make(chan []*call, 1)
	go func() {
		batch, _ := n.linger(want, []*call{{}}, 1)
		out <- batch
	}()
	return out
}

// TestLingerNeverWaitsOnATimer: a sender expecting callers back that do
// not come leaves at once with what it has, however long Linger is (an
// hour here: the timed wait this replaced would hang the test).
func TestLingerNeverWaitsOnATimer(t *testing.T) {
	n := lingerConn(time.Hour)
	select {
	case b := <-lingerAsync(n, 5):
		if len(b) != 1 {
			t.Fatalf("linger returned %d calls, want the 1 it had", len(b))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("linger waited for callers that never came")
	}
}

// TestLingerTakesWhatQueued: every call already queued joins the batch
// (up to MaxBatch items), however many were expected.
func TestLingerTakesWhatQueued(t *testing.T) {
	n := lingerConn(time.Hour)
	for range 4 {
		n.queue <- &call{}
	}
	b, _ := n.linger(3, []*call{{}}, 1)
	if len(b) != 5 || len(n.queue) != 0 {
		t.Fatalf("linger took %d calls and left %d queued, want 5 and 0", len(b), len(n.queue))
	}
}

// TestLingerStopsAtMaxBatch: the expected calls are not gathered beyond
// MaxBatch items.
func TestLingerStopsAtMaxBatch(t *testing.T) {
	n := lingerConn(time.Hour)
	n.c.cfg.MaxBatch = 2
	n.queue <- &call{items: make([]*weirv1.CheckItem, 1)}
	n.queue <- &call{items: make([]*weirv1.CheckItem, 1)}
	b, _ := n.linger(10, []*call{{}}, 1)
	if len(b) != 2 {
		t.Fatalf("linger returned %d calls, want 2", len(b))
	}
}

// TestLingerConfig: a negative Linger is refused; 0 (no linger) is valid.
func TestLingerConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Cluster, cfg.GatewayID = []string{"a:1"}, "g"
	if cfg.Linger != 50*time.Microsecond {
		t.Errorf("default Linger %v, want 50µs", cfg.Linger)
	}
	cfg.Linger = -time.Microsecond
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Linger -1µs") {
		t.Errorf("Validate with Linger -1µs: %v", err)
	}
	cfg.Linger = 0
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate with Linger 0: %v", err)
	}
}
