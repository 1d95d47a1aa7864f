package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
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

// TestLingerGathersReturningCallers: callers answered by one request that
// ask again at once leave together in the next one. Eight callers in a
// closed loop with a linger far above any scheduling delay here average at
// least six checks per request (7.6 when written; 4.0 without the linger,
// where the first caller to come back usually leaves alone).
func TestLingerGathersReturningCallers(t *testing.T) {
	const callers, rounds = 8, 40
	cl := lingerClient(t, 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s0 := cl.Stats()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for w := range callers {
		wg.Go(func() {
			key := fmt.Sprintf("apikey:c%d", w)
			for i := range rounds {
				d, err := cl.CheckKey(ctx, key, 1, "wide")
				if err != nil || !d.Allowed || d.Limits[0].Fallback {
					errs <- fmt.Errorf("caller %d check %d: %+v %v", w, i, d, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := cl.Stats()
	rpcs, items := s.RPCs-s0.RPCs, s.Items-s0.Items
	if items != callers*rounds {
		t.Fatalf("%d items sent, want %d", items, callers*rounds)
	}
	if per := float64(items) / float64(rpcs); per < callers*3/4 {
		t.Errorf("%d checks in %d requests: %.1f per request, want at least %d", items, rpcs, per, callers*3/4)
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
