package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/weirlimit/weir/node"
)

// A small harness of real nodes on loopback, port 0 (after
// test/cluster_test.go; that package is not imported).
type cluster struct {
	nodes []*node.Node
}

func nodeConfig(t testing.TB, id string) node.Config {
	cfg := node.DefaultConfig(id)
	cfg.DataDir = t.TempDir()
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Shards = 2
	cfg.GossipProbeInterval = 100 * time.Millisecond
	cfg.GossipProbeTimeout = 50 * time.Millisecond
	cfg.GossipInterval = 50 * time.Millisecond
	cfg.GossipSuspicionMult = 2
	cfg.RaftHeartbeatTimeout = 300 * time.Millisecond
	cfg.RaftElectionTimeout = 300 * time.Millisecond
	cfg.LeaveTimeout = 10 * time.Second
	level := slog.LevelError
	if os.Getenv("WEIR_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return cfg
}

func newCluster(t testing.TB, n int) *cluster {
	c := &cluster{}
	t.Cleanup(c.close)
	for i := 0; i < n; i++ {
		cfg := nodeConfig(t, fmt.Sprintf("n%d", i+1))
		cfg.BootstrapExpect = n
		if i > 0 {
			cfg.Join = []string{c.nodes[0].GossipAddr()}
		}
		nd, err := node.New(cfg)
		if err != nil {
			t.Fatalf("node %s: %v", cfg.ID, err)
		}
		if err := nd.Start(); err != nil {
			t.Fatalf("start %s: %v", cfg.ID, err)
		}
		c.nodes = append(c.nodes, nd)
	}
	waitFor(t, 30*time.Second, func() error {
		for _, nd := range c.nodes {
			if err := nd.Ready(); err != nil {
				return fmt.Errorf("%s not ready: %v", nd.ID(), err)
			}
			if m := nd.Members(); len(m.Members) != n {
				return fmt.Errorf("%s sees %d members, want %d", nd.ID(), len(m.Members), n)
			}
		}
		return nil
	})
	return c
}

func (c *cluster) grpcAddrs() []string {
	var out []string
	for _, nd := range c.nodes {
		if nd != nil {
			out = append(out, nd.GRPCAddr())
		}
	}
	return out
}

func (c *cluster) kill(i int) {
	if c.nodes[i] != nil {
		_ = c.nodes[i].Close()
		c.nodes[i] = nil
	}
}

func (c *cluster) close() {
	for i := range c.nodes {
		c.kill(i)
	}
}

// applyRules writes a rules file through the first live node's HTTP API
// and returns the new version.
func (c *cluster) applyRules(t testing.TB, yaml string) uint64 {
	t.Helper()
	var nd *node.Node
	for _, n := range c.nodes {
		if n != nil {
			nd = n
			break
		}
	}
	resp, err := http.Post("http://"+nd.HTTPAddr()+"/v1/rules:apply", "application/yaml", bytes.NewBufferString(yaml))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("apply: %d %s", resp.StatusCode, body)
	}
	var out struct {
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	return out.Version
}

// waitFor polls f until it returns nil or the deadline passes.
func waitFor(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("condition not met within %v: %v", d, err)
}
