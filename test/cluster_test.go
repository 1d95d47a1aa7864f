package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"log/slog"

	"github.com/weirlimit/weir/node"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// cluster is a set of real nodes in this process on loopback, port 0.
type cluster struct {
	t     *testing.T
	nodes []*node.Node
	conns map[string]*grpc.ClientConn
	mu    sync.Mutex
	seq   int
}

func testConfig(t *testing.T, id string) node.Config {
	cfg := node.DefaultConfig(id)
	cfg.DataDir = t.TempDir()
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Shards = 2
	// Loose enough that -race on a loaded 2-core machine does not suspect
	// live nodes (a false death moves partitions).
	cfg.GossipProbeInterval = 200 * time.Millisecond
	cfg.GossipProbeTimeout = 200 * time.Millisecond
	cfg.GossipInterval = 50 * time.Millisecond
	cfg.GossipSuspicionMult = 3
	cfg.RaftHeartbeatTimeout = 300 * time.Millisecond
	cfg.RaftElectionTimeout = 300 * time.Millisecond
	cfg.LeaveTimeout = 10 * time.Second
	cfg.ForwardTimeout = 2 * time.Second // -race on a loaded 2-core machine stalls for hundreds of ms
	level := slog.LevelError
	if os.Getenv("WEIR_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return cfg
}

// newCluster starts n nodes that bootstrap Raft together and waits until
// every node is ready and sees all n members.
func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{t: t, conns: map[string]*grpc.ClientConn{}}
	t.Cleanup(c.close)
	for i := 0; i < n; i++ {
		cfg := testConfig(t, fmt.Sprintf("n%d", i+1))
		cfg.BootstrapExpect = n
		if i > 0 {
			cfg.Join = []string{c.nodes[0].GossipAddr()}
		}
		c.start(cfg)
	}
	c.seq = n
	c.waitStable(n)
	return c
}

func (c *cluster) start(cfg node.Config) *node.Node {
	c.t.Helper()
	nd, err := node.New(cfg)
	if err != nil {
		c.t.Fatalf("node %s: %v", cfg.ID, err)
	}
	if err := nd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", cfg.ID, err)
	}
	c.nodes = append(c.nodes, nd)
	return nd
}

// add starts one more node that joins the running cluster.
func (c *cluster) add() *node.Node {
	c.seq++
	cfg := testConfig(c.t, fmt.Sprintf("n%d", c.seq))
	cfg.Join = []string{c.live()[0].GossipAddr()}
	return c.start(cfg)
}

func (c *cluster) live() []*node.Node {
	var out []*node.Node
	for _, n := range c.nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// kill stops node i hard (no hand-off).
func (c *cluster) kill(i int) {
	_ = c.nodes[i].Close()
	c.nodes[i] = nil
}

func (c *cluster) close() {
	for _, cc := range c.conns {
		_ = cc.Close()
	}
	for i, n := range c.nodes {
		if n != nil {
			_ = n.Close()
			c.nodes[i] = nil
		}
	}
}

// waitStable polls until every live node is ready, sees want members and
// there are no pending hand-offs.
func (c *cluster) waitStable(want int) {
	c.t.Helper()
	waitFor(c.t, 30*time.Second, func() error {
		for _, n := range c.live() {
			if err := n.Ready(); err != nil {
				return fmt.Errorf("%s not ready: %v", n.ID(), err)
			}
			m := n.Members()
			if len(m.Members) != want {
				return fmt.Errorf("%s sees %d members, want %d", n.ID(), len(m.Members), want)
			}
		}
		return nil
	})
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

// applyRules writes a rules file through node n's HTTP API and waits until
// every live node has the new version.
func (c *cluster) applyRules(n *node.Node, yaml string) uint64 {
	c.t.Helper()
	resp, err := http.Post("http://"+n.HTTPAddr()+"/v1/rules:apply", "application/yaml", bytes.NewBufferString(yaml))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		c.t.Fatalf("apply: %d %s", resp.StatusCode, body)
	}
	var out struct {
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		c.t.Fatal(err)
	}
	waitFor(c.t, 10*time.Second, func() error {
		for _, nd := range c.live() {
			if s := nd.Store().Current(); s == nil || s.Version < out.Version {
				return fmt.Errorf("%s has not applied version %d", nd.ID(), out.Version)
			}
		}
		return nil
	})
	return out.Version
}

// waitFor polls f until it returns nil or the deadline passes.
func waitFor(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("condition not met within %v: %v", d, err)
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
			c.applyRules(c.nodes[0], exactRules)
			got := c.hammer(c.live(), 24, 10, one("apikey:hot", "exact"))
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
	c.applyRules(c.nodes[0], exactRules)
	items := func() []*weirv1.CheckItem {
		return []*weirv1.CheckItem{
			{Key: "apikey:mw", Rule: "perminute", Cost: 1, Group: 1},
			{Key: "apikey:mw", Rule: "perhour", Cost: 1, Group: 1},
		}
	}
	got := c.hammer(c.live(), 16, 10, items)
	if got != 30 {
		t.Fatalf("allowed %d grouped requests, want 30", got)
	}
	resp, err := c.limiter(c.nodes[1]).Check(context.Background(), &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "apikey:mw", Rule: "perhour", Cost: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Results[0].Remaining; r != 20 {
		t.Fatalf("perhour remaining %d after 30 grouped passes, want 20 (denied groups must take nothing)", r)
	}
}
