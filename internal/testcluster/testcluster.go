// Package testcluster starts real Weir nodes in the test process, on
// loopback with port 0, for the cluster, SDK and bench tests.
package testcluster

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

	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
)

// Name is the cluster name (the gossip label, the certificates' trust
// domain) of every node this process starts, unique to the process.
// memberlist gossips to a dead member's address for 30 s, so once a test
// kills a node, its port may be taken by a node of a test in another
// package running at the same time; with a shared label that node could
// learn the other cluster's members (names n1, n2, n3 alike). (Stop 36's
// TestMixedVersionWriteRefused failure, first put down to this, was the
// test's own race: its last write went to a leader that had just left.)
var Name = fmt.Sprintf("weirtest%d", os.Getpid())

// Config is a node config for tests: loopback, port 0, a temporary data
// dir, two shards, and gossip and Raft timing loose enough that -race on a
// loaded 2-core machine does not suspect live nodes (a false death moves
// partitions). WEIR_TEST_LOG=1 turns on debug logs.
func Config(t testing.TB, id string) node.Config {
	cfg := node.DefaultConfig(id)
	cfg.ClusterName = Name
	cfg.DataDir = t.TempDir()
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Shards = 2
	cfg.GossipProbeInterval = 200 * time.Millisecond
	cfg.GossipProbeTimeout = 200 * time.Millisecond
	cfg.GossipInterval = 50 * time.Millisecond
	cfg.GossipSuspicionMult = 3
	cfg.RaftHeartbeatTimeout = 300 * time.Millisecond
	cfg.RaftElectionTimeout = 300 * time.Millisecond
	cfg.LeaveTimeout = 10 * time.Second
	cfg.ForwardTimeout = 2 * time.Second
	level := slog.LevelError
	if os.Getenv("WEIR_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return cfg
}

// Cluster is a set of nodes; Nodes[i] is nil once killed.
type Cluster struct {
	T     testing.TB
	Nodes []*node.Node
	// Faults, when not nil, carries every node's peer links (set by
	// NewWithFaults; nodes started later are wired too).
	Faults *Faults
	// PKI is the cluster CA when the cluster runs with TLS (NewWith).
	PKI   *PKI
	seq   int
	opts  Options
	admin *http.Client
}

// New starts n nodes that bootstrap Raft together and waits until every
// node is ready and sees all n members. The nodes are closed at cleanup.
func New(t testing.TB, n int) *Cluster {
	t.Helper()
	return start(t, n, nil)
}

// NewWithFaults is New with every node's peer links (gossip and peer gRPC)
// running through c.Faults, so the test can cut nodes off and heal them.
func NewWithFaults(t testing.TB, n int) *Cluster {
	t.Helper()
	return start(t, n, NewFaults())
}

// NewConfigured is New with each node's config passed through configure
// before the node starts (e.g. to make the cluster one of several regions).
func NewConfigured(t testing.TB, n int, configure func(*node.Config)) *Cluster {
	t.Helper()
	return startWith(t, n, nil, configure)
}

func start(t testing.TB, n int, f *Faults) *Cluster {
	t.Helper()
	return startWith(t, n, f, nil)
}

func startWith(t testing.TB, n int, f *Faults, configure func(*node.Config)) *Cluster {
	t.Helper()
	c := &Cluster{T: t, Faults: f}
	t.Cleanup(c.Close)
	for i := 0; i < n; i++ {
		cfg := Config(t, fmt.Sprintf("n%d", i+1))
		if configure != nil {
			configure(&cfg)
		}
		cfg.BootstrapExpect = n
		if i > 0 {
			cfg.Join = []string{c.Nodes[0].GossipAddr()}
		}
		c.Start(cfg)
	}
	c.seq = n
	c.WaitStable(n)
	return c
}

// Start starts one node with cfg and adds it to the cluster.
func (c *Cluster) Start(cfg node.Config) *node.Node {
	c.T.Helper()
	if c.Faults != nil {
		c.Faults.Wire(&cfg)
	}
	nd, err := node.New(cfg)
	if err != nil {
		c.T.Fatalf("node %s: %v", cfg.ID, err)
	}
	if c.Faults != nil {
		c.Faults.Learn(nd)
	}
	if err := nd.Start(); err != nil {
		_ = nd.Close()
		c.T.Fatalf("start %s: %v", cfg.ID, err)
	}
	// Closed before its data dir (a TempDir made before it) is removed:
	// cleanups run last first, and the node writes there while it runs.
	c.T.Cleanup(func() { _ = nd.Close() })
	c.Nodes = append(c.Nodes, nd)
	return nd
}

// Add starts one more node that joins the running cluster.
func (c *Cluster) Add() *node.Node {
	c.T.Helper()
	c.seq++
	cfg := c.config(fmt.Sprintf("n%d", c.seq))
	cfg.Join = []string{c.Live()[0].GossipAddr()}
	return c.Start(cfg)
}

// Live lists the nodes not killed.
func (c *Cluster) Live() []*node.Node {
	var out []*node.Node
	for _, n := range c.Nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// GRPCAddrs lists the live nodes' gRPC addresses.
func (c *Cluster) GRPCAddrs() []string {
	var out []string
	for _, n := range c.Live() {
		out = append(out, n.GRPCAddr())
	}
	return out
}

// Kill stops node i hard (no hand-off).
func (c *Cluster) Kill(i int) {
	if c.Nodes[i] != nil {
		_ = c.Nodes[i].Close()
		c.Nodes[i] = nil
	}
}

// Close stops every live node.
func (c *Cluster) Close() {
	for i := range c.Nodes {
		c.Kill(i)
	}
}

// WaitStable polls until every live node is ready (which includes no
// pending hand-off) and has want members in its ring.
func (c *Cluster) WaitStable(want int) {
	c.T.Helper()
	testwait.For(c.T, 30*time.Second, "a stable cluster", func() error {
		for _, n := range c.Live() {
			if err := n.Ready(); err != nil {
				return fmt.Errorf("%s not ready: %v", n.ID(), err)
			}
			if k := InRing(n); k != want {
				return fmt.Errorf("%s sees %d members, want %d", n.ID(), k, want)
			}
		}
		return nil
	})
}

// InRing counts the members n lists as alive or suspect: those in its
// ring (Members also lists members that are leaving, dead or left).
func InRing(n *node.Node) int {
	k := 0
	for _, m := range n.Members().Members {
		if m.State == "alive" || m.State == "suspect" {
			k++
		}
	}
	return k
}

// ApplyRules writes a rules file through the first live node's HTTP API and
// waits until every live node has applied the new version, which it returns.
func (c *Cluster) ApplyRules(yaml string) uint64 {
	c.T.Helper()
	n := c.Live()[0]
	hc, scheme := c.httpClient()
	var body []byte
	// A leader change under a loaded machine answers not_leader: retried
	// (applying the same file again changes nothing).
	testwait.For(c.T, 15*time.Second, "a Raft leader to apply the rules", func() error {
		resp, err := hc.Post(scheme+n.HTTPAddr()+"/v1/rules:apply", "application/yaml", bytes.NewBufferString(yaml))
		if err != nil {
			c.T.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		switch {
		case resp.StatusCode == http.StatusOK:
			return nil
		case resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(body, []byte(`"code":"not_leader"`)):
			return fmt.Errorf("apply: %d %s", resp.StatusCode, body)
		}
		c.T.Fatalf("apply: %d %s", resp.StatusCode, body)
		return nil
	})
	var out struct {
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		c.T.Fatal(err)
	}
	testwait.For(c.T, 10*time.Second, "the rules on every node", func() error {
		for _, nd := range c.Live() {
			if s := nd.Store().Current(); s == nil || s.Version < out.Version {
				return fmt.Errorf("%s has not applied version %d", nd.ID(), out.Version)
			}
		}
		return nil
	})
	return out.Version
}
