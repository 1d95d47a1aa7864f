package shard_test

import (
	"errors"
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node/shard"
)

// gw models a gateway SDK against one auto-lease counter: it spends a
// lease it holds, else asks the owner (naming itself unless nameless),
// keeps what is granted for a second and gives back what it did not spend.
type gw struct {
	id       uint64
	tokens   int64
	expires  time.Duration // on the clock's offset from its start
	nameless bool
	auto     bool
	granted  int64
	leased   int64 // checks served from a lease
}

const autoID, autoPart = 7, 3

func (g *gw) check(t *testing.T, e *shard.Engine, at time.Duration, lim bucket.Limit) bool {
	t.Helper()
	if g.tokens > 0 && at < g.expires {
		g.tokens--
		g.leased++
		return true
	}
	if g.tokens > 0 { // expired: give back
		back := shard.Item{ID: autoID, Partition: autoPart, Limit: lim, Cost: g.tokens, Refund: true, Auto: g.auto}
		checkOne(t, e, back)
		g.tokens = 0
	}
	it := shard.Item{ID: autoID, Partition: autoPart, Limit: lim, Cost: 1, Auto: g.auto}
	if !g.nameless {
		it.Gateway = g.id
	}
	r := checkOne(t, e, it)
	if r.Granted > 0 {
		if !r.Allowed {
			t.Fatalf("granted %d tokens to a denied check", r.Granted)
		}
		g.tokens, g.expires = r.Granted, at+time.Second
		g.granted += r.Granted
	}
	return r.Allowed
}

func checkOne(t *testing.T, e *shard.Engine, it shard.Item) shard.Result {
	t.Helper()
	out := make([]shard.Result, 1)
	if err := e.Check(ctxT(t), []shard.Item{it}, out); err != nil {
		t.Fatalf("Check: %v", err)
	}
	return out[0]
}

// run drives perSec checks a second for d, from the gateways in turn, on
// the fake clock (whose offset from its start is *at), and returns the
// checks admitted and the tokens granted meanwhile.
func run(t *testing.T, e *shard.Engine, c *clock, at *time.Duration, lim bucket.Limit, gws []*gw, perSec int, d time.Duration) (admitted, granted int64) {
	t.Helper()
	step := time.Second / time.Duration(perSec)
	before := int64(0)
	for _, g := range gws {
		before += g.granted
	}
	for i := 0; time.Duration(i)*step < d; i++ {
		c.Add(step)
		*at += step
		if gws[i%len(gws)].check(t, e, *at, lim) {
			admitted++
		}
	}
	for _, g := range gws {
		granted += g.granted
	}
	return admitted, granted - before
}

func gateways(ids ...uint64) []*gw {
	var out []*gw
	for _, id := range ids {
		out = append(out, &gw{id: id, auto: true})
	}
	return out
}

// A key hammered by two gateways is leased within a fraction of a second;
// grants are at most AutoLeaseSize and are taken from the bucket, so the
// checks admitted (by the owner or from leases) never exceed burst +
// refill.
func TestAutoLeaseGrantsHotKeys(t *testing.T) {
	c := newClock()
	e := start(t, shard.Config{Shards: 1, Now: c.Now})
	lim := bucket.Limit{Rate: 1000, Period: time.Second, Burst: 400}
	var at time.Duration
	gws := gateways(11, 12)
	admitted, granted := run(t, e, c, &at, lim, gws, 4000, 2*time.Second)
	if granted == 0 || gws[0].leased == 0 || gws[1].leased == 0 {
		t.Fatalf("a hot key from two gateways was not leased to both: granted %d, leased hits %d and %d", granted, gws[0].leased, gws[1].leased)
	}
	st, _ := e.Stats(ctxT(t))
	// AutoLeaseSize(400, 2) = 50 tokens a grant at most.
	if st.AutoLeases == 0 || int64(st.AutoLeaseTokens) != granted || st.AutoLeaseTokens > 50*st.AutoLeases || st.HotKeys > 1 {
		t.Fatalf("stats %+v, granted %d", st, granted)
	}
	if bound := lim.Burst + lim.Rate*2; admitted > bound {
		t.Fatalf("admitted %d > burst + refill %d", admitted, bound)
	}
	if low := lim.Burst + lim.Rate*2 - 2*50 - 1; admitted < low {
		t.Fatalf("admitted %d < burst + refill − a grant per gateway %d", admitted, low)
	}
}

// One gateway, a slow key, callers that cannot hold a lease and rules
// that are not auto (lease: off or a count) get no grant.
func TestAutoLeaseNotGranted(t *testing.T) {
	lim := bucket.Limit{Rate: 10_000, Period: time.Second, Burst: 400}
	cases := map[string]struct {
		gws    []*gw
		perSec int
	}{
		"one gateway":         {gateways(11), 4000},
		"below the threshold": {gateways(11, 12), 90},
		"no gateway named":    {[]*gw{{id: 11, auto: true, nameless: true}, {id: 12, auto: true, nameless: true}}, 4000},
		"not an auto rule":    {[]*gw{{id: 11}, {id: 12}}, 4000},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newClock()
			e := start(t, shard.Config{Shards: 1, Now: c.Now})
			var at time.Duration
			if _, granted := run(t, e, c, &at, lim, tc.gws, tc.perSec, 3*time.Second); granted != 0 {
				t.Fatalf("granted %d", granted)
			}
		})
	}
}

// Leasing goes on while the key stays above half the threshold, stops once
// it cools below that, and starts again when it heats up.
func TestAutoLeaseStopsWhenCool(t *testing.T) {
	c := newClock()
	e := start(t, shard.Config{Shards: 1, Now: c.Now})
	lim := bucket.Limit{Rate: 10_000, Period: time.Second, Burst: 400}
	var at time.Duration
	gws := gateways(11, 12)
	if _, g := run(t, e, c, &at, lim, gws, 4000, time.Second); g == 0 {
		t.Fatal("never leased")
	}
	run(t, e, c, &at, lim, gws, 80, 3*time.Second)
	if _, g := run(t, e, c, &at, lim, gws, 80, 2*time.Second); g == 0 {
		t.Fatal("stopped leasing at 80/s, above half the threshold")
	}
	run(t, e, c, &at, lim, gws, 20, 5*time.Second)
	if _, g := run(t, e, c, &at, lim, gws, 20, 3*time.Second); g != 0 {
		t.Fatalf("granted %d tokens to a key cooled to 20/s", g)
	}
	if st, _ := e.Stats(ctxT(t)); st.HotKeys != 0 {
		t.Fatalf("%d hot keys after cooling", st.HotKeys)
	}
	if _, g := run(t, e, c, &at, lim, gws, 4000, time.Second); g == 0 {
		t.Fatal("not leased again once hot")
	}
}

// A hot key's denial asks its gateway to come back when a whole grant
// could be taken, not after one token's refill; a cold key's does not.
func TestAutoLeaseDeniedWaitsForAGrant(t *testing.T) {
	c := newClock()
	e := start(t, shard.Config{Shards: 1, Now: c.Now})
	lim := bucket.Limit{Rate: 1000, Period: time.Second, Burst: 400}
	cold := shard.Item{ID: 9, Partition: autoPart, Limit: lim, Cost: 400, Auto: true, Gateway: 11}
	if r := checkOne(t, e, cold); !r.Allowed {
		t.Fatal("a full bucket denied its burst")
	}
	cold.Cost = 1
	if r := checkOne(t, e, cold); r.Allowed || r.RetryAfter != time.Millisecond {
		t.Fatalf("a cold key's denial: %+v, want retry after 1ms", r)
	}
	var at time.Duration
	run(t, e, c, &at, lim, gateways(11, 12), 4000, time.Second) // hot; the bucket runs dry
	hot := shard.Item{ID: autoID, Partition: autoPart, Limit: lim, Cost: 1, Auto: true, Gateway: 11}
	var r shard.Result
	for range 500 {
		if r = checkOne(t, e, hot); !r.Allowed {
			break
		}
	}
	// AutoLeaseSize(400, 2) = 50 tokens, plus the check's own: 51ms.
	if r.Allowed || r.RetryAfter < 50*time.Millisecond || r.RetryAfter > 51*time.Millisecond {
		t.Fatalf("a hot key's denial: %+v, want retry after about 51ms", r)
	}
}

// Slow keys do not keep a key that heats up later from being tracked:
// the sweep drops cold keys even while they are still asked for, so a
// full table makes room.
func TestAutoLeaseSlowKeysMakeRoom(t *testing.T) {
	c := newClock()
	e := start(t, shard.Config{Shards: 1, Now: c.Now, AutoLeaseKeys: 8, SweepEvery: 5 * time.Millisecond})
	lim := bucket.Limit{Rate: 10_000, Period: time.Second, Burst: 400}
	slow := func() { // 8 keys at 5 tokens/s each, asked every 200ms
		for id := range uint64(8) {
			checkOne(t, e, shard.Item{ID: 100 + id, Partition: autoPart, Limit: lim, Cost: 1, Auto: true, Gateway: 11})
		}
	}
	slow()
	var at time.Duration
	gws := gateways(11, 12)
	testwait.For(t, 10*time.Second, "the hot key leased beside slow keys", func() error {
		slow()
		if _, g := run(t, e, c, &at, lim, gws, 4000, 200*time.Millisecond); g == 0 {
			return errors.New("not leased")
		}
		return nil
	})
}
