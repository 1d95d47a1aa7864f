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
		var lg lingerState
		batch, _ := n.linger(context.Background(), &lg, want, []*call{{}}, 1)
		out <- batch
	}()
	return out
}

// TestLingerWaitsForTheCallsExpected: the sender waits (here up to an
// hour) until the expected calls have queued, and no longer.
func TestLingerWaitsForTheCallsExpected(t *testing.T) {
	n := lingerConn(time.Hour)
	got := lingerAsync(n, 3)
	n.queue <- &call{}
	select {
	case b := <-got:
		t.Fatalf("linger returned %d calls with 3 expected", len(b))
	case <-time.After(50 * time.Millisecond):
	}
	n.queue <- &call{}
	select {
	case b := <-got:
		if len(b) != 3 {
			t.Fatalf("linger returned %d calls, want 3", len(b))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("linger still waiting with the 3 expected calls queued")
	}
	if len(n.queue) != 0 {
		t.Errorf("%d calls left queued", len(n.queue))
	}
}

// TestLingerGivesUpAfterLinger: calls that do not come back cost at most
// Linger; the sender then leaves with what it has.
func TestLingerGivesUpAfterLinger(t *testing.T) {
	n := lingerConn(time.Millisecond)
	select {
	case b := <-lingerAsync(n, 5):
		if len(b) != 1 {
			t.Fatalf("linger returned %d calls, want the 1 it had", len(b))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("linger did not give up after its 1ms")
	}
}

// TestLingerSkipsWaitsThatFindNobody: a timed wait that finds no caller
// makes the next sends skip it, 1, 2, 4, … of them (a gateway's answered
// callers go upstream first), while the calls already queued still
// join; a wait that finds a caller ends the skipping.
func TestLingerSkipsWaitsThatFindNobody(t *testing.T) {
	n := lingerConn(time.Millisecond)
	var lg lingerState
	send := func() int {
		t.Helper()
		b, _ := n.linger(context.Background(), &lg, 5, []*call{{}}, 1)
		return len(b)
	}
	waits := 0 // timed waits that found nobody: each raises idle
	for range 8 {
		idle := lg.idle
		if got := send(); got != 1 {
			t.Fatalf("linger returned %d calls, want 1", got)
		}
		if lg.idle > idle {
			waits++
		}
	}
	// Waits at sends 1, 3 and 6 (skipping 1, then 2, then 4 after
	// them): 3 waits in 8 sends, 2 skips left.
	if waits != 3 || lg.idle != 3 || lg.skip != 2 {
		t.Fatalf("%d timed waits in 8 sends, idle %d, skip %d; want 3, 3, 2", waits, lg.idle, lg.skip)
	}
	n.queue <- &call{} // queued already: joins while skipping
	if got := send(); got != 2 || lg.skip != 1 {
		t.Fatalf("with a call queued: %d calls, skip %d; want 2, 1", got, lg.skip)
	}
	send() // the last skip
	// A call that arrives during the timed wait (not before it: the
	// drain would take it, which says nothing of the wait): idle and skip
	// start over. There is no hook to tell when the wait has begun, so a
	// call drained first is tried again with a longer head start.
	n.c.cfg.Linger = time.Hour
	for head := 10 * time.Millisecond; ; head *= 2 {
		if head > 5*time.Second {
			t.Fatalf("no call was taken by the timed wait; idle %d, skip %d", lg.idle, lg.skip)
		}
		lg.skip = 0
		idle := lg.idle
		got := make(chan int, 1)
		go func() {
			b, _ := n.linger(context.Background(), &lg, 2, []*call{{}}, 1)
			got <- len(b)
		}()
		time.Sleep(head)
		n.queue <- &call{}
		if b := <-got; b != 2 {
			t.Fatalf("linger returned %d calls, want 2", b)
		}
		if lg.idle != idle { // the wait took it
			if lg.idle != 0 || lg.skip != 0 {
				t.Fatalf("a wait that found a call: idle %d, skip %d; want 0, 0", lg.idle, lg.skip)
			}
			return
		}
	}
}

// TestLingerStopsAtMaxBatch: the expected calls are not waited for
// beyond MaxBatch items.
func TestLingerStopsAtMaxBatch(t *testing.T) {
	n := lingerConn(time.Hour)
	n.c.cfg.MaxBatch = 2
	n.queue <- &call{items: make([]*weirv1.CheckItem, 1)}
	select {
	case b := <-lingerAsync(n, 10):
		if len(b) != 2 {
			t.Fatalf("linger returned %d calls, want 2", len(b))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("linger waited past MaxBatch")
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
