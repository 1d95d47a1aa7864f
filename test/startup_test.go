package test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
)

// A node started late with --bootstrap-expect 3 into a running cluster
// joins its Raft group. Its id sorts before the three members', so the
// first three ids it sees include its own: it used to bootstrap a group
// of its own from them, then refuse the leader's appends ("not in the Raft
// configuration") and got the rules late or never (1 of 3 runs).
func TestLateNodeWithBootstrapExpect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	weirBin(t)
	procs, startAll := newProcs(t, "b", 3)
	startAll()
	testwait.For(t, 30*time.Second, "the three nodes", func() error { return allReady(procs) })
	late := &proc{id: "a1", dir: t.TempDir(), http: freeAddr(t), grpc: freeAddr(t), raft: freeAddr(t), gossip: freeAddr(t)}
	t.Cleanup(func() { late.stop(syscall.SIGKILL) })
	startProc(t, late, procs[0].gossip, 3)
	testwait.For(t, 30*time.Second, "the late node in the Raft group", func() error {
		if err := ready(late.http); err != nil {
			return err
		}
		c, err := ringInfo(procs[0].http)
		if err != nil {
			return err
		}
		for _, m := range c.Members {
			if m.ID == late.id && m.RaftRole != "none" && m.RaftRole != "" {
				return nil
			}
		}
		return fmt.Errorf("%s is in no Raft role: %+v", late.id, c.Members)
	})
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(scaleRules), 0o644); err != nil {
		t.Fatal(err)
	}
	cli(t, "rules", "apply", "-f", file, "--addr", procs[1].http)
	testwait.For(t, 20*time.Second, "the rule on the late node", func() error {
		_, answered, err := httpCheck(late.http, "five", "k")
		if err == nil && !answered {
			err = fmt.Errorf("%s does not know the rule", late.id)
		}
		if err != nil {
			out := late.out.String()
			return fmt.Errorf("%w; its log ends:\n%s", err, out[max(0, len(out)-600):])
		}
		return nil
	})
	// A group of its own shows as a log entry of its own: the leader's
	// first append finds the late node's log at index 1 (an empty one is
	// at 0), 3 of 4 runs before the fix; or as the leader refused.
	out := late.out.String()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "not in the Raft configuration") ||
			strings.Contains(line, "failed to get previous log") && strings.Contains(line, "last-index=1 ") {
			t.Fatalf("%s bootstrapped a Raft group of its own:\n%s", late.id, line)
		}
	}
}

// Six nodes started at once with --bootstrap-expect 3: n6, then n1..n5
// together, each joining n6. Each takes the first three ids it sees, and
// those differ while the nodes find each other (n5 may see n4, n5, n6
// first, n3 n2, n3, n6). Bootstrapped as they were found, they made
// several Raft groups; the bootstrap now waits, as the first ring does,
// for the member list to settle, so all take one group: one leader named
// by every node, one configuration, and a rule written through one node
// reaches all.
func TestNodesStartedTogetherBootstrapOneGroup(t *testing.T) {
	c := &testcluster.Cluster{T: t}
	t.Cleanup(c.Close)
	config := func(i int) node.Config {
		cfg := testcluster.Config(t, fmt.Sprintf("n%d", i))
		cfg.BootstrapExpect = 3
		// Slow gossip: the nodes learn late that others bootstrapped
		// (InGroup), as nodes of a larger cluster do.
		cfg.GossipInterval = 200 * time.Millisecond
		return cfg
	}
	first := c.Start(config(6))
	nodes := make([]*node.Node, 5)
	errs := make([]error, 5)
	var wg sync.WaitGroup
	for i := range nodes {
		cfg := config(i + 1)
		cfg.Join = []string{first.GossipAddr()}
		n, err := node.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close() })
		nodes[i] = n
		wg.Go(func() { errs[i] = n.Start() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start n%d: %v", i+1, err)
		}
	}
	c.Nodes = append(c.Nodes, nodes...)
	c.WaitStable(6)
	testwait.For(t, 10*time.Second, "one leader and one configuration", func() error {
		leader, _ := first.Store().Leader()
		conf := raftIDs(t, first)
		for _, n := range c.Nodes {
			if l, _ := n.Store().Leader(); l != leader || l == "" {
				return fmt.Errorf("%s names leader %q, %s names %q", n.ID(), l, first.ID(), leader)
			}
			if ids := raftIDs(t, n); !slices.Equal(ids, conf) {
				return fmt.Errorf("%s has configuration %v, %s %v", n.ID(), ids, first.ID(), conf)
			}
		}
		return nil
	})
	wrapCluster(t, c).ApplyRules(exactRules) // on every node, or it fails the test
}
