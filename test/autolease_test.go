package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
)

// Both rules are as fast as a hot key needs (200/s, burst 200) and fail
// closed, so a check the cluster did not decide is never admitted; one
// leaves lease to its default (auto), the other says off.
const autoLeaseRules = `
rules:
  - id: hotauto
    match: {route: /auto}
    key: apikey
    rate: 200
    period: 1s
    burst: 200
    fail_mode: closed
    timeout: 2s
  - id: hotoff
    match: {route: /off}
    key: apikey
    rate: 200
    period: 1s
    burst: 200
    fail_mode: closed
    timeout: 2s
    lease: off
`

func autoLeaseClient(t *testing.T, c *testcluster.Cluster, id string, ver uint64) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.Cluster = c.GRPCAddrs()
	cfg.GatewayID = id
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	testwait.For(t, 20*time.Second, "gateway "+id+" has the rules", func() error {
		if got := cl.RulesVersion(); got < ver {
			return fmt.Errorf("rules version %d, want %d", got, ver)
		}
		return nil
	})
	return cl
}

// hammerKey sends checks of key under rule from 3 workers per client until
// done says stop (asked after every 50 checks of a worker) or 10 s have
// passed, and returns the checks admitted and how long it ran.
func hammerKey(t *testing.T, cls []*client.Client, rule, key string, done func() bool) (admitted int64, elapsed time.Duration) {
	t.Helper()
	var n atomic.Int64
	var stop atomic.Bool
	deadline := time.Now().Add(10 * time.Second)
	start := time.Now()
	var wg sync.WaitGroup
	for _, cl := range cls {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() && time.Now().Before(deadline) {
					for range 50 {
						d, err := cl.CheckKey(context.Background(), key, 1, rule)
						if err != nil {
							t.Error(err)
							stop.Store(true)
							return
						}
						if d.Allowed {
							n.Add(1)
						}
					}
					if done() {
						stop.Store(true)
					}
				}
			}()
		}
	}
	wg.Wait()
	return n.Load(), time.Since(start)
}

// TestAutoLease: on a 3-node cluster, a key hammered from two SDK gateways
// under a rule that leaves lease to its default (auto) is leased to both
// without any rule change, and the checks admitted stay within burst +
// rate × T (grants are taken from the owner's bucket before they are
// spent). The same load under lease: off is never leased, a key hammered
// from a single gateway is not leased, and leasing stops once the key
// cools.
func TestAutoLease(t *testing.T) {
	c := testcluster.New(t, 3)
	ver := c.ApplyRules(autoLeaseRules)
	cl1 := autoLeaseClient(t, c, "gw-auto-1", ver)
	cl2 := autoLeaseClient(t, c, "gw-auto-2", ver)
	solo := autoLeaseClient(t, c, "gw-auto-solo", ver)
	both := []*client.Client{cl1, cl2}
	const burst, rate = 200, 200

	// lease: off: two gateways well above the threshold for 1.5 s.
	start := time.Now()
	hammerKey(t, both, "hotoff", "apikey:off", func() bool { return time.Since(start) > 1500*time.Millisecond })
	for _, cl := range both {
		if st := cl.Stats(); st.AutoLeases != 0 || st.LeaseHits != 0 {
			t.Fatalf("lease: off was leased: %+v", st)
		}
	}

	// One gateway alone, as hard, for 1.5 s: no lease.
	start = time.Now()
	hammerKey(t, []*client.Client{solo}, "hotauto", "apikey:solo", func() bool { return time.Since(start) > 1500*time.Millisecond })
	if st := solo.Stats(); st.AutoLeases != 0 || st.LeaseHits != 0 {
		t.Fatalf("a key from one gateway was leased: %+v", st)
	}

	// lease: auto (the default), two gateways: both get leases.
	leased := func() bool {
		s1, s2 := cl1.Stats(), cl2.Stats()
		return s1.AutoLeases > 0 && s2.AutoLeases > 0 && s1.LeaseHits > 50 && s2.LeaseHits > 50
	}
	admitted, elapsed := hammerKey(t, both, "hotauto", "apikey:hot", leased)
	s1, s2 := cl1.Stats(), cl2.Stats()
	t.Logf("admitted %d in %v; gateway 1: %d leases (%d tokens), %d lease hits; gateway 2: %d leases (%d tokens), %d lease hits",
		admitted, elapsed, s1.AutoLeases, s1.AutoLeaseTokens, s1.LeaseHits, s2.AutoLeases, s2.AutoLeaseTokens, s2.LeaseHits)
	if !leased() {
		t.Fatalf("the hot key was not leased to both gateways within 10 s")
	}
	// Grants are at most AutoLeaseSize(200, 2) = 25 tokens.
	if s1.AutoLeaseTokens > 25*s1.AutoLeases || s2.AutoLeaseTokens > 25*s2.AutoLeases {
		t.Fatalf("a grant above 25 tokens: %+v, %+v", s1, s2)
	}
	if limit := burst + int64(rate*elapsed.Seconds()) + 1; admitted > limit {
		t.Fatalf("admitted %d in %v > burst + rate × T = %d", admitted, elapsed, limit)
	}
	hot := func() (n float64) {
		for _, nd := range c.Live() {
			n += metric(t, nd, "weir_auto_lease_hot_keys")
		}
		return n
	}
	if hot() < 1 {
		// The gauge is renewed by the owner's next sweep (every second).
		testwait.For(t, 5*time.Second, "the owner to report the hot key", func() error {
			if n := hot(); n < 1 {
				return fmt.Errorf("%v hot keys", n)
			}
			return nil
		})
	}

	// Idle, the key cools (its owner forgets it two seconds after its
	// last check); then a few checks from both gateways are not leased.
	testwait.For(t, 15*time.Second, "the hot key to cool", func() error {
		if n := hot(); n != 0 {
			return fmt.Errorf("%v hot keys", n)
		}
		return nil
	})
	before1, before2 := cl1.Stats().AutoLeases, cl2.Stats().AutoLeases
	for range 10 {
		for _, cl := range both {
			if _, err := cl.CheckKey(context.Background(), "apikey:hot", 1, "hotauto"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if a1, a2 := cl1.Stats().AutoLeases, cl2.Stats().AutoLeases; a1 != before1 || a2 != before2 {
		t.Fatalf("leases granted after the key cooled: %d and %d new", a1-before1, a2-before2)
	}
}
