package client

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
)

// TestRoutesToOwner checks that the SDK sends each key straight to its
// owner in a 3-node cluster: no node forwards anything, and every key's
// decisions are exact.
func TestRoutesToOwner(t *testing.T) {
	c := testcluster.New(t, 3)
	v := c.ApplyRules(testRules)
	cl := newTestClient(t, c, "gw1", nil)
	testwait.For(t, 10*time.Second, "the client's rules and 3-member ring", func() error {
		if got := cl.RulesVersion(); got < v {
			return fmt.Errorf("client has version %d, want %d", got, v)
		}
		if mv := cl.view.Load(); mv == nil || len(mv.addrs) != 3 {
			return fmt.Errorf("client view %v", mv)
		}
		return nil
	})
	const forwarded = "weir_forwarded_items_total"
	before := make([]float64, len(c.Nodes))
	for i, n := range c.Nodes {
		before[i] = scrape(t, n.HTTPAddr(), forwarded)
	}

	const keys = 150
	mv := cl.view.Load()
	perOwner := map[string]int{}
	for i := 0; i < keys; i++ {
		perOwner[mv.ring.Owner(fmt.Sprintf("route-%d", i))]++
	}
	if len(perOwner) != 3 {
		t.Fatalf("keys spread over %d owners, want 3: %v", len(perOwner), perOwner)
	}
	ctx := context.Background()
	work := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range work {
				for j, want := range []int64{2, 1, 0, -1} {
					d, err := cl.CheckKey(ctx, key, 1, "exact")
					if err != nil {
						t.Errorf("%s check %d: %v", key, j+1, err)
						return
					}
					l := d.Limits[0]
					if l.Fallback || d.Allowed != (want >= 0) || (want >= 0 && l.Remaining != want) {
						t.Errorf("%s check %d: allowed %v remaining %d fallback %v; want remaining %d (-1: denied)",
							key, j+1, d.Allowed, l.Remaining, l.Fallback, want)
					}
				}
			}
		}()
	}
	for i := 0; i < keys; i++ {
		work <- fmt.Sprintf("route-%d", i)
	}
	close(work)
	wg.Wait()
	// A ring that flaps for a moment (a member suspected on a loaded
	// machine) makes a node forward an item or two that the SDK sent on
	// its own view; more than 1% of the items means the SDK routes wrong.
	for i, n := range c.Nodes {
		switch got := scrape(t, n.HTTPAddr(), forwarded) - before[i]; {
		case got > keys*4/100:
			t.Errorf("%s forwarded %v of %d items; the SDK should call owners directly", n.ID(), got, keys*4)
		case got > 0:
			t.Logf("%s forwarded %v of %d items (a ring that changed for a moment)", n.ID(), got, keys*4)
		}
	}
	t.Logf("keys per owner %v; stats %+v", perOwner, cl.Stats())

	// The counter does move when a check enters at a non-owner, so the
	// zeros above mean something.
	key := "route-control"
	owner := mv.addrs[mv.ring.Owner(key)]
	for _, n := range c.Nodes {
		if n.GRPCAddr() == owner {
			continue
		}
		base := scrape(t, n.HTTPAddr(), forwarded)
		body := fmt.Sprintf(`{"key":%q,"rule":"exact"}`, key)
		resp, err := http.Post("http://"+n.HTTPAddr()+"/v1/limits/check", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("check at non-owner %s: status %d", n.ID(), resp.StatusCode)
		}
		if got := scrape(t, n.HTTPAddr(), forwarded) - base; got != 1 {
			t.Errorf("non-owner %s forwarded %v items for one check, want 1", n.ID(), got)
		}
		break
	}
}
