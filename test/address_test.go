package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/node"
)

// Tests of addressing: nodes that come back at another address (a
// rescheduled pod keeps its id and volume, not its IP), and joins that
// retry host names until one answers.

const movedRules = `
rules:
  - {id: m1, match: {route: /m1}, key: apikey, rate: 1, period: 1h, burst: 5}
  - {id: m2, match: {route: /m2}, key: ip, rate: 10, period: 1s}
  - {id: m3, match: {route: /m3}, key: user, rate: 5, period: 1m, fail_mode: closed}
`

// startCluster starts len(cfgs) nodes from cfgs (bootstrap 3, the rest
// joining the first) and waits until they are stable.
func startCluster(t *testing.T, cfgs []node.Config) *testcluster.Cluster {
	t.Helper()
	c := &testcluster.Cluster{T: t}
	t.Cleanup(c.Close)
	for i := range cfgs {
		cfgs[i].BootstrapExpect = 3
		if i > 0 {
			cfgs[i].Join = []string{c.Nodes[0].GossipAddr()}
		}
		c.Start(cfgs[i])
	}
	c.WaitStable(len(cfgs))
	return c
}

// onHost returns cfg listening on host with port 0 everywhere.
func onHost(cfg node.Config, host string) node.Config {
	a := net.JoinHostPort(host, "0")
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr = a, a, a, a
	return cfg
}

// putRule writes one rule through n's HTTP API (any node forwards to the
// Raft leader) and returns its status.
func putRule(n *node.Node, id string) (int, string) {
	body := fmt.Sprintf(`{"match":{"route":"/%s"},"key":"apikey","rate":3,"period":"1s"}`, id)
	req, _ := http.NewRequest(http.MethodPut, "http://"+n.HTTPAddr()+"/v1/rules/"+id, bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// ruleIDs lists the ids of the rules n serves.
func ruleIDs(n *node.Node) []string {
	var out []string
	for _, r := range n.Store().Current().Rules {
		out = append(out, r.ID)
	}
	slices.Sort(out)
	return out
}

// memberJSON is a member as GET /v1/cluster lists it.
type memberJSON struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	GRPCAddr string `json:"grpc_addr"`
}

// membersOf lists the members n reports over HTTP.
func membersOf(n *node.Node) ([]memberJSON, error) {
	resp, err := http.Get("http://" + n.HTTPAddr() + "/v1/cluster")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var c struct {
		Members []memberJSON `json:"members"`
	}
	return c.Members, json.NewDecoder(resp.Body).Decode(&c)
}

// waitRejoined waits until every live node lists moved at its new gRPC
// address among the ring's members and serves every rule in want, and the
// Raft configuration has moved as a voter. (Its configured Raft address
// may be the old one: Raft dials members where gossip says they are, see
// rulesraft.Config.PeerAddr; that the moved node gets the writes made
// after the move shows Raft reaches it.)
func waitRejoined(t *testing.T, c *testcluster.Cluster, moved *node.Node, want []string) {
	t.Helper()
	testwait.For(t, 45*time.Second, moved.ID()+" rejoined at its new address", func() error {
		for _, n := range c.Live() {
			if err := n.Ready(); err != nil {
				return fmt.Errorf("%s: %v", n.ID(), err)
			}
			members, err := membersOf(n)
			if err != nil {
				return err
			}
			found := false
			for _, m := range members {
				if m.ID == moved.ID() {
					if m.State != "alive" || m.GRPCAddr != moved.GRPCAddr() {
						return fmt.Errorf("%s lists %s %s at %s, want alive at %s", n.ID(), m.ID, m.State, m.GRPCAddr, moved.GRPCAddr())
					}
					found = true
				}
			}
			if !found {
				return fmt.Errorf("%s does not list %s", n.ID(), moved.ID())
			}
			if got := ruleIDs(n); !slices.Equal(got, want) {
				return fmt.Errorf("%s serves rules %v, want %v", n.ID(), got, want)
			}
		}
		conf, err := moved.Store().Configuration()
		if err != nil {
			return err
		}
		for _, s := range conf {
			if s.ID == moved.ID() {
				if !s.Voter {
					return fmt.Errorf("raft configuration has %s as a non-voter", s.ID)
				}
				return nil
			}
		}
		return fmt.Errorf("%s is not in the raft configuration %+v", moved.ID(), conf)
	})
}

// A node restarted with the same id and data dir at another address, as a
// rescheduled pod is: first after a hard kill (the others still hold its
// old address as alive until gossip declares it dead), then after a
// graceful leave (the Raft leader removed it). Each time it rejoins at
// the new address, Raft reaches it there, and no rule is lost; a rule
// written through it afterwards reaches every node.
func TestRescheduledNodeRejoinsAtNewAddress(t *testing.T) {
	cfgs := []node.Config{testcluster.Config(t, "n1"), testcluster.Config(t, "n2"), testcluster.Config(t, "n3")}
	c := startCluster(t, cfgs)
	c.ApplyRules(movedRules)
	if code, body := putRule(c.Nodes[2], "before"); code != http.StatusOK {
		t.Fatalf("put: %d %s", code, body)
	}
	want := []string{"before", "m1", "m2", "m3"}
	testwait.For(t, 10*time.Second, "the rules everywhere", func() error {
		for _, n := range c.Live() {
			if got := ruleIDs(n); !slices.Equal(got, want) {
				return fmt.Errorf("%s: %v", n.ID(), got)
			}
		}
		return nil
	})

	for i, step := range []struct {
		how, host string
		graceful  bool
	}{{"killed", "127.0.0.2", false}, {"left gracefully", "127.0.0.3", true}} {
		old := c.Nodes[1]
		oldGRPC, oldRaft := old.GRPCAddr(), old.RaftAddr()
		if step.graceful {
			if err := old.Leave(t.Context()); err != nil {
				t.Fatalf("leave: %v", err)
			}
		}
		c.Kill(1)
		cfg := onHost(cfgs[1], step.host) // same id and data dir
		cfg.Join = []string{c.Nodes[0].GossipAddr()}
		start := time.Now()
		moved := c.Start(cfg) // appended to c.Nodes: put it back in its slot
		c.Nodes = c.Nodes[:len(c.Nodes)-1]
		c.Nodes[1] = moved
		if moved.GRPCAddr() == oldGRPC || moved.RaftAddr() == oldRaft || !strings.HasPrefix(moved.RaftAddr(), step.host+":") {
			t.Fatalf("restarted at %s / %s, want new addresses on %s", moved.GRPCAddr(), moved.RaftAddr(), step.host)
		}
		waitRejoined(t, c, moved, want)
		t.Logf("%s, restarted on %s: rejoined with every rule after %v", step.how, step.host, time.Since(start).Round(time.Millisecond))
		id := fmt.Sprintf("after%d", i)
		testwait.For(t, 20*time.Second, "a write through the moved node", func() error {
			if code, body := putRule(moved, id); code != http.StatusOK {
				return fmt.Errorf("%d %s", code, body)
			}
			return nil
		})
		want = append(want, id)
		slices.Sort(want)
		waitRejoined(t, c, moved, want)
	}
}

// Every node comes back at a new address at once (a whole StatefulSet
// rescheduled onto new IPs): no Raft configuration names a reachable
// address, so Raft finds the members where gossip says they are now
// (rulesraft.Config.PeerAddr) and elects a leader. No rule is lost, and a
// write afterwards reaches every node.
func TestEveryNodeMovedRejoins(t *testing.T) {
	cfgs := []node.Config{testcluster.Config(t, "n1"), testcluster.Config(t, "n2"), testcluster.Config(t, "n3")}
	c := startCluster(t, cfgs)
	c.ApplyRules(movedRules)
	want := ruleIDs(c.Nodes[0])
	oldRaft := map[string]string{}
	for i, n := range c.Nodes {
		oldRaft[n.ID()] = n.RaftAddr()
		c.Kill(i)
	}
	c.Nodes = nil
	start := time.Now()
	for i := range cfgs {
		cfg := onHost(cfgs[i], "127.0.0.1") // new ports, same ids and data dirs
		cfg.Join = nil
		if i > 0 {
			cfg.Join = []string{c.Nodes[0].GossipAddr()}
		}
		c.Start(cfg)
	}
	c.WaitStable(3)
	for _, n := range c.Nodes {
		if n.RaftAddr() == oldRaft[n.ID()] {
			t.Fatalf("%s came back at its old Raft address", n.ID())
		}
		waitRejoined(t, c, n, want)
	}
	t.Logf("all three moved: a leader and every rule back after %v", time.Since(start).Round(time.Millisecond))
	testwait.For(t, 20*time.Second, "a write after the move", func() error {
		if code, body := putRule(c.Nodes[1], "after"); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	want = append(want, "after")
	slices.Sort(want)
	for _, n := range c.Nodes {
		waitRejoined(t, c, n, want)
	}
}

// A node started before any member it names in Join is up keeps retrying
// with backoff, resolving host names again on each attempt, until one
// answers; an address that never answers does not stop the others.
func TestJoinRetriesNamesUntilOneAnswers(t *testing.T) {
	seed := freeAddr(t)
	_, port, _ := net.SplitHostPort(seed)
	dead := freeAddr(t) // nothing listens here
	c := &testcluster.Cluster{T: t}
	t.Cleanup(c.Close)
	late := testcluster.Config(t, "n2")
	late.BootstrapExpect = 2
	late.Join = []string{dead, "localhost:" + port}
	c.Start(late) // its first join attempt failed: the seed does not exist yet
	if err := c.Nodes[0].Ready(); err == nil {
		t.Fatal("n2 is ready alone")
	}
	first := testcluster.Config(t, "n1")
	first.GossipAddr = seed
	first.BootstrapExpect = 2
	c.Start(first)
	c.WaitStable(2)
}
