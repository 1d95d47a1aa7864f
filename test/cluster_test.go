package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/node"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// cluster adds gRPC clients and load helpers to the shared harness.
type cluster struct {
	*testcluster.Cluster
	t     *testing.T
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	return wrapCluster(t, testcluster.New(t, n))
}

// wrapCluster adds the suite's helpers (cached Limiter connections) to tc.
func wrapCluster(t *testing.T, tc *testcluster.Cluster) *cluster {
	c := &cluster{Cluster: tc, t: t, conns: map[string]*grpc.ClientConn{}}
	t.Cleanup(func() {
		for _, cc := range c.conns {
			_ = cc.Close()
		}
	})
	return c
}

func (c *cluster) limiter(n *node.Node) weirv1.LimiterClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc, ok := c.conns[n.GRPCAddr()]
	if !ok {
		var err error
		cc, err = grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.t.Fatal(err)
		}
		c.conns[n.GRPCAddr()] = cc
	}
	return weirv1.NewLimiterClient(cc)
}

// memberState is the state n lists for member id ("" if not listed).
func memberState(n *node.Node, id string) string {
	for _, m := range n.Members().Members {
		if m.ID == id {
			return m.State
		}
	}
	return ""
}

// hammer sends single-item checks for key/rule from workers spread over the
// given nodes until each worker has made per checks; it returns the number
// allowed. Errors fail the test.
func (c *cluster) hammer(nodes []*node.Node, workers, per int, items func() []*weirv1.CheckItem) (allowed int64) {
	c.t.Helper()
	var wg sync.WaitGroup
	var errs atomic.Int64
	for w := 0; w < workers; w++ {
		cl := c.limiter(nodes[w%len(nodes)])
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := cl.Check(ctx, &weirv1.CheckRequest{Items: items()})
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				all := true
				for _, r := range resp.Results {
					if r.ErrorCode != 0 {
						errs.Add(1)
						all = false
						break
					}
					all = all && r.Allowed
				}
				if all {
					atomic.AddInt64(&allowed, 1)
				}
			}
		}()
	}
	wg.Wait()
	if e := errs.Load(); e > 0 {
		c.t.Fatalf("%d checks failed", e)
	}
	return allowed
}

func one(key, rule string) func() []*weirv1.CheckItem {
	return func() []*weirv1.CheckItem {
		return []*weirv1.CheckItem{{Key: key, Rule: rule, Cost: 1}}
	}
}

const exactRules = `
rules:
  - id: exact
    match: {route: /x, method: GET, plan: "*"}
    key: apikey
    rate: 1
    period: 1h
    burst: 100
  - id: perminute
    match: {route: /mw, method: GET}
    key: apikey
    rate: 1
    period: 1h
    burst: 30
  - id: perhour
    match: {route: /mw, method: GET}
    key: apikey
    rate: 1
    period: 24h
    burst: 50
`

// Many concurrent clients on one key, through every node: the allowed count
// equals the burst exactly (the refill is negligible: 1 per hour).
func TestClusterExactOneKey(t *testing.T) {
	for _, size := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("nodes=%d", size), func(t *testing.T) {
			if testing.Short() && size == 5 {
				t.Skip("short")
			}
			c := newCluster(t, size)
			c.ApplyRules(exactRules)
			got := c.hammer(c.Live(), 24, 10, one("apikey:hot", "exact"))
			if got != 100 {
				t.Fatalf("allowed %d of 240 checks, want exactly 100 (the burst)", got)
			}
		})
	}
}

// Two windows on one key, checked as one group: a request passes only if
// both allow, and no tokens are taken otherwise — so after the smaller
// window is spent, the larger one still has exactly burst - 30 left.
func TestClusterMultiWindowAllOrNothing(t *testing.T) {
	c := newCluster(t, 3)
	c.ApplyRules(exactRules)
	items := func() []*weirv1.CheckItem {
		return []*weirv1.CheckItem{
			{Key: "apikey:mw", Rule: "perminute", Cost: 1, Group: 1},
			{Key: "apikey:mw", Rule: "perhour", Cost: 1, Group: 1},
		}
	}
	got := c.hammer(c.Live(), 16, 10, items)
	if got != 30 {
		t.Fatalf("allowed %d grouped requests, want 30", got)
	}
	resp, err := c.limiter(c.Nodes[1]).Check(context.Background(), &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "apikey:mw", Rule: "perhour", Cost: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Results[0].Remaining; r != 20 {
		t.Fatalf("perhour remaining %d after 30 grouped passes, want 20 (denied groups must take nothing)", r)
	}
}
