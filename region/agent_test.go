package region

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/internal/testwait"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/region/share"
)

// TestScaleAddsUpToTheGlobalLimit: the regions' scaled capacities and
// rates add up to at most the global ones for any split of Whole, and a
// bucket's capacity does not move with its share.
func TestScaleAddsUpToTheGlobalLimit(t *testing.T) {
	splits := [][]int64{{share.Whole}, {share.Whole / 2, share.Whole / 2}, {10_000, 737_500, 252_500}, {333_333, 333_333, 333_334}}
	for _, alg := range []bucket.Algorithm{bucket.TokenBucket, bucket.LeakyBucket, bucket.FixedWindow, bucket.SlidingWindow} {
		l := bucket.Limit{Algorithm: alg, Rate: 10_000, Period: time.Minute, Burst: 2_000}
		for _, split := range splits {
			var capSum int64
			var rateSum float64
			for _, sh := range split {
				s := Scale(l, sh, len(split))
				capSum += s.Capacity()
				rateSum += float64(s.Rate) / s.Period.Seconds()
			}
			if capSum > l.Capacity() {
				t.Errorf("%v %v: capacities add up to %d > %d", alg, split, capSum, l.Capacity())
			}
			if global := float64(l.Rate) / l.Period.Seconds(); rateSum > global*1.000001 {
				t.Errorf("%v %v: rates add up to %.4f/s > %.4f/s", alg, split, rateSum, global)
			}
		}
	}
	l := bucket.Limit{Algorithm: bucket.TokenBucket, Rate: 100, Period: time.Second, Burst: 90}
	if a, b := Scale(l, 10_000, 3), Scale(l, 900_000, 3); a.Capacity() != 30 || b.Capacity() != 30 {
		t.Errorf("bucket capacity moved with the share: %d at 1%%, %d at 90%%, want 30 (burst / regions)", a.Capacity(), b.Capacity())
	}
	if s := Scale(bucket.Limit{Algorithm: bucket.TokenBucket, Rate: 5, Period: time.Second}, 0, 3); s.Rate != 0 {
		t.Errorf("share 0 scales to %+v, want rate 0 (blocks)", s)
	}
}

func TestParsePeers(t *testing.T) {
	got, err := ParsePeers("eu=eu.weir:9090, us=10.0.0.1:9090")
	if err != nil || len(got) != 2 || got["eu"] != "eu.weir:9090" || got["us"] != "10.0.0.1:9090" {
		t.Fatalf("ParsePeers = %v, %v", got, err)
	}
	for _, bad := range []string{"eu", "=h:1", "eu=", "eu=h:1,eu=h:2"} {
		if _, err := ParsePeers(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("ParsePeers(%q) = %v, want ErrConfig", bad, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Region: "eu", Peers: map[string]string{"us": "h:1"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"no region":   {Peers: map[string]string{"us": "h:1"}},
		"no peers":    {Region: "eu"},
		"self peer":   {Region: "eu", Peers: map[string]string{"eu": "h:1"}},
		"lost>=claim": {Region: "eu", Peers: map[string]string{"us": "h:1"}, LostAfter: 3 * time.Second, ClaimAfter: time.Second},
		"floor":       {Region: "eu", Peers: map[string]string{"us": "h:1"}, Floor: share.Whole},
	} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate = %v, want ErrConfig", name, err)
		}
	}
}

// ownsAll is a region of one node: it owns every key.
type ownsAll struct{}

func (ownsAll) Owner(string) (bool, string, bool) { return true, "", true }

// TestExchangeMergesAndAnswers drives one agent's gRPC handler directly:
// a peer configured with other regions is refused and nothing changes; a
// well-formed exchange is merged (the key becomes held) and answered with
// this region's record.
func TestExchangeMergesAndAnswers(t *testing.T) {
	a, err := New(Config{Region: "eu", Peers: map[string]string{"us": "unused:1"}, Interval: time.Hour}, ownsAll{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done; a.Close() }()

	_, err = a.Exchange(ctx, &weirv1.RegionExchangeRequest{From: "us", Regions: []string{"ap", "eu", "us"}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("mismatched regions: err = %v, want FailedPrecondition", err)
	}
	if st, _ := a.Status(ctx); st.Keys != 0 {
		t.Fatalf("refused exchange left %d keys", st.Keys)
	}

	// us asks for a key homed in eu (so it is shared).
	key := "k1"
	for i := 2; share.Home(tableKey("orders", key), 2) != 0; i++ {
		key = fmt.Sprintf("k%d", i)
	}
	tab, _ := share.New(share.DefaultConfig("us", []string{"eu", "us"}), time.Now().UnixNano())
	tab.Observe(tableKey("orders", key), 10, 10)
	tab.Step(time.Now().UnixNano())
	resp, err := a.Exchange(ctx, &weirv1.RegionExchangeRequest{From: "us", Regions: []string{"eu", "us"}, Keys: toWire(tab.Outbox())})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetKeys()) != 1 || resp.GetKeys()[0].GetKey() != key || len(resp.GetKeys()[0].GetRecords()) != 2 {
		t.Fatalf("answer %v: want %s with both regions' records", resp.GetKeys(), key)
	}
	if st, _ := a.Status(ctx); st.Keys != 1 {
		t.Fatalf("after the exchange the agent holds %d keys, want 1", st.Keys)
	}
}

// flipOwner is a region of two agents whose ring the test controls: it
// names which of them owns every key.
type flipOwner struct {
	self  string
	owner *atomic.Value // string: the owning agent's name
	addrs map[string]string
}

func (f flipOwner) Owner(string) (bool, string, bool) {
	o := f.owner.Load().(string)
	return o == f.self, f.addrs[o], true
}

// TestOwnerChangeHandsOnTheLedger: when a key's owner moves to another
// node of the region, the old owner hands its records on (Region.Exchange
// with handoff) and the new owner goes on from the region's share as it
// was, not from the default share (which, for a key homed in this region,
// would be nearly all of it: over-admission until a peer region's relay).
func TestOwnerChangeHandsOnTheLedger(t *testing.T) {
	owner := &atomic.Value{}
	owner.Store("a1")
	addrs := map[string]string{}
	lis := map[string]net.Listener{}
	for _, name := range []string{"a1", "a2"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[name], addrs[name] = l, l.Addr().String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	agents := map[string]*Agent{}
	for _, name := range []string{"a1", "a2"} {
		a, err := New(Config{Region: "eu", Peers: map[string]string{"us": "127.0.0.1:1"}, Interval: 20 * time.Millisecond,
			LostAfter: time.Hour, ClaimAfter: 2 * time.Hour,
			DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}},
			flipOwner{self: name, owner: owner, addrs: addrs})
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		weirv1.RegisterRegionServer(srv, a)
		agents[name] = a
		wg.Add(2)
		go func() { defer wg.Done(); _ = srv.Serve(lis[name]) }()
		go func() { defer wg.Done(); _ = a.Run(ctx); srv.Stop() }()
	}
	defer func() {
		cancel()
		wg.Wait()
		for _, a := range agents {
			a.Close()
		}
	}()

	// A key homed in eu that us asks for: eu (not using it) gives it to us.
	key := "k1"
	for i := 2; share.Home(tableKey("orders", key), 2) != 0; i++ {
		key = fmt.Sprintf("k%d", i)
	}
	tab, _ := share.New(share.DefaultConfig("us", []string{"eu", "us"}), time.Now().UnixNano())
	tab.Observe(tableKey("orders", key), 10, 10)
	tab.Step(time.Now().UnixNano())
	if _, err := agents["a1"].Exchange(ctx, &weirv1.RegionExchangeRequest{From: "us", Regions: []string{"eu", "us"}, Keys: toWire(tab.Outbox())}); err != nil {
		t.Fatal(err)
	}
	before := agents["a1"].Share("orders", key)
	if def := agents["a2"].Share("orders", key); before >= def/2 {
		t.Fatalf("a1 holds %d of the key after giving it to us; the default is %d: nothing to tell apart", before, def)
	}

	owner.Store("a2")
	// As the node does on every new ring: until the hand-on arrives, a2
	// decides the key it does not hold with at most the floor, never
	// with the default (all but the floors here, its home).
	agents["a2"].RingChanged()
	agents["a1"].RingChanged()
	floor := agents["a2"].scfg.Floor
	testwait.For(t, 10*time.Second, "a2 to adopt a1's ledger", func() error {
		if got := agents["a2"].Share("orders", key); got > max(before, floor) {
			t.Fatalf("a2 decides with %d of the key before adopting a1's %d (floor %d)", got, before, floor)
		}
		if got := agents["a2"].Shares()[[2]string{"orders", key}]; got != before {
			return fmt.Errorf("a2 holds %d (held: %v), want a1's %d", got, agents["a2"].Shares(), before)
		}
		if _, held := agents["a1"].Shares()[[2]string{"orders", key}]; held {
			return errors.New("a1 still holds the key")
		}
		return nil
	})
	recs, err := agents["a2"].Ledger(ctx, "orders", key)
	if err != nil || len(recs) != 2 {
		t.Fatalf("a2's ledger %v, %v: want eu's and us's records", recs, err)
	}
}
