//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/peerauth"
)

// cnode is one node's container.
type cnode struct {
	id   string // n1, n2, n3: the node id
	name string // the container and its volume
	ip   string // on the cluster network: what the node advertises; fixed, so a reconnected container comes back at it
	ctl  string // on the control network: where the suite's HTTP requests go
}

func (n *cnode) url(path string) string { return "http://" + n.ctl + ":8080" + path }

// cluster is three nodes in containers on a network of their own, and the
// host-side clients that drive them. Each container is also on a control
// network that only the suite uses (nodes advertise their cluster-network
// IP, so they never talk over it): a node cut off the cluster network is
// still reachable from the host, as a client on its side of a split would
// reach it. The loads send direct checks only to nodes marked usable (the
// fault's target is unmarked while it is down or cut off).
type cluster struct {
	t      *testing.T
	run    string
	image  string
	net    string // the cluster network
	ctlNet string // the control network
	nodes  []*cnode
	client *http.Client // checks and reads: short timeout
	writes *http.Client // rule writes: long enough for a leader election
	usable atomic.Uint32
	rr     atomic.Uint32
}

// newCluster starts the three containers and waits until they are ready
// and agree on one ring. Cleanup removes everything labelled with the run.
func newCluster(t *testing.T, image, run string) *cluster {
	t.Helper()
	c := &cluster{t: t, run: run, image: image, net: run + "-net", ctlNet: run + "-ctl",
		client: &http.Client{Timeout: time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}},
		writes: &http.Client{Timeout: 5 * time.Second}}
	t.Cleanup(func() {
		if t.Failed() {
			// The logs go to files, so that the failures stay the last
			// lines of the output (CI shows its tail).
			dir, err := os.MkdirTemp("", run+"-logs-")
			for _, n := range c.nodes {
				out, _ := docker("logs", n.name)
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, n.id+".log"), []byte(out), 0o644)
				}
			}
			t.Logf("the nodes' logs: %s (%v)", dir, err)
		}
		removeByLabel(t, label, run)
		if left, _ := docker("ps", "-aq", "--filter", "label="+label+"="+run); left != "" {
			t.Errorf("cleanup left containers: %s", left)
		}
	})
	prefix := createNetwork(t, c.net, run)
	ctl := createNetwork(t, c.ctlNet, run)
	var ips []string
	for i := 1; i <= 3; i++ {
		n := &cnode{id: fmt.Sprintf("n%d", i), name: fmt.Sprintf("%s-n%d", run, i),
			ip: fmt.Sprintf("%s.%d", prefix, 10+i), ctl: fmt.Sprintf("%s.%d", ctl, 10+i)}
		c.nodes = append(c.nodes, n)
		ips = append(ips, n.ip)
	}
	// The gossip keyring, copied into each container (nodes without a key
	// would bind gossip and Raft to loopback).
	keyFile := filepath.Join(t.TempDir(), "gossip-keyring")
	if err := os.WriteFile(keyFile, []byte(peerauth.EncodeKey(peerauth.GenerateKey())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		if _, err := docker("volume", "create", "--label", label+"="+run, n.name); err != nil {
			t.Fatal(err)
		}
		if _, err := docker("create", "--name", n.name, "--label", label+"="+run,
			"--network", c.net, "--ip", n.ip, "-v", n.name+":/data", image,
			"node", "--id", n.id, "--advertise", n.ip, "--join", strings.Join(ips, ","),
			"--bootstrap-expect", "3", "--log-level", cmp.Or(os.Getenv("WEIR_CHAOS_LOG_LEVEL"), "info"), "--gossip-key-file", "/gossip-keyring"); err != nil {
			t.Fatal(err)
		}
		if _, err := docker("cp", keyFile, n.name+":/gossip-keyring"); err != nil {
			t.Fatal(err)
		}
		if _, err := docker("network", "connect", "--ip", n.ctl, c.ctlNet, n.name); err != nil {
			t.Fatal(err)
		}
		if _, err := docker("start", n.name); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if _, err := c.waitRing(c.nodes, c.nodes, time.Minute); err != nil {
		t.Fatalf("chaos: the cluster did not form: %v", err)
	}
	t.Logf("3 containers on %s.0/24: ready and one ring %v after the last one started", prefix, time.Since(start).Round(time.Millisecond))
	c.setUsable(c.nodes...)
	return c
}

// setUsable marks the nodes the direct loads may send to.
func (c *cluster) setUsable(ns ...*cnode) {
	var m uint32
	for _, n := range ns {
		m |= 1 << c.index(n)
	}
	c.usable.Store(m)
}

func (c *cluster) index(n *cnode) int { return slices.Index(c.nodes, n) }

// others lists the nodes but n.
func (c *cluster) others(n *cnode) []*cnode {
	var out []*cnode
	for _, o := range c.nodes {
		if o != n {
			out = append(out, o)
		}
	}
	return out
}

// metric reads one unlabelled gauge or counter from n's /metrics.
func (c *cluster) metric(n *cnode, name string) (float64, error) {
	resp, err := c.client.Get(n.url("/metrics"))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s in /metrics (%s)", n.id, name, resp.Status)
}

// pick returns the next usable node, round robin; nil when none is.
func (c *cluster) pick() *cnode {
	m := c.usable.Load()
	for range len(c.nodes) {
		i := int(c.rr.Add(1)) % len(c.nodes)
		if m&(1<<i) != 0 {
			return c.nodes[i]
		}
	}
	return nil
}

// clusterJSON is the part of GET /v1/cluster the suite reads.
type clusterJSON struct {
	Self        string `json:"self"`
	Leader      string `json:"leader"`
	RingVersion uint64 `json:"ring_version"`
	Members     []struct {
		ID    string `json:"id"`
		State string `json:"state"`
	} `json:"members"`
}

func (c *cluster) info(n *cnode) (clusterJSON, error) {
	var out clusterJSON
	resp, err := c.client.Get(n.url("/v1/cluster"))
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("%s: /v1/cluster %d", n.id, resp.StatusCode)
	}
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

func (c *cluster) ready(n *cnode) error {
	resp, err := c.client.Get(n.url("/readyz"))
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", n.id, strings.TrimSpace(string(body)))
	}
	return nil
}

// waitRing polls (every 100 ms, up to d) until every node of ask is ready
// (when it is asked about all members) and reports the same ring version
// with exactly the members of alive as alive; it returns how long it took.
func (c *cluster) waitRing(ask, alive []*cnode, d time.Duration) (time.Duration, error) {
	start := time.Now()
	var want []string
	for _, n := range alive {
		want = append(want, n.id)
	}
	slices.Sort(want)
	var last error
	for time.Since(start) < d {
		last = func() error {
			var version uint64
			for i, n := range ask {
				if len(alive) == len(c.nodes) {
					if err := c.ready(n); err != nil {
						return err
					}
				}
				info, err := c.info(n)
				if err != nil {
					return err
				}
				var got []string
				for _, m := range info.Members {
					if m.State == "alive" {
						got = append(got, m.ID)
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					return fmt.Errorf("%s sees %v alive, want %v", n.id, got, want)
				}
				if i > 0 && info.RingVersion != version {
					return fmt.Errorf("%s has ring %d, %s %d", n.id, info.RingVersion, ask[0].id, version)
				}
				version = info.RingVersion
			}
			return nil
		}()
		if last == nil {
			return time.Since(start), nil
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
	return time.Since(start), fmt.Errorf("no agreed ring after %v: %v", d, last)
}

// leader returns the node the others name as the Raft leader.
func (c *cluster) leader() *cnode {
	for _, n := range c.nodes {
		if info, err := c.info(n); err == nil && info.Leader != "" {
			for _, l := range c.nodes {
				if l.id == info.Leader {
					return l
				}
			}
		}
	}
	return nil
}

// applyRules applies a rules file through any node.
func (c *cluster) applyRules(yaml string) {
	c.t.Helper()
	var last string
	for range 50 {
		n := c.pick()
		resp, err := c.writes.Post(n.url("/v1/rules:apply"), "application/yaml", strings.NewReader(yaml))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = string(body)
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond) // retry pace while a leader is elected
	}
	c.t.Fatalf("chaos: applying the rules: %s", last)
}

// errUnanswered is a check no node answered (an error or a timeout).
var errUnanswered = errors.New("unanswered")

// check asks n for one token of key under rule.
func (c *cluster) check(n *cnode, key, rule string) (bool, error) {
	body, _ := json.Marshal(map[string]any{"key": key, "rule": rule, "cost": 1})
	resp, err := c.client.Post(n.url("/v1/limits/check"), "application/json", bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("%w: %v", errUnanswered, err)
	}
	defer resp.Body.Close()
	var out struct {
		Allowed bool   `json:"allowed"`
		Error   string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%w: %d %s %v", errUnanswered, resp.StatusCode, out.Error, err)
	}
	return out.Allowed, nil
}

// putRule writes one rule through n; true when acknowledged.
func (c *cluster) putRule(n *cnode, id string) bool {
	body := fmt.Sprintf(`{"match":{"route":"/w/%s"},"key":"apikey","rate":1,"period":"1s"}`, id)
	req, _ := http.NewRequest(http.MethodPut, n.url("/v1/rules/"+id), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.writes.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// ruleIDs lists the rules n serves (consistent: read through the leader).
func (c *cluster) ruleIDs(n *cnode, consistent bool) (map[string]bool, error) {
	u := n.url("/v1/rules")
	if consistent {
		u += "?consistent=true"
	}
	resp, err := c.writes.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: GET /v1/rules %d", n.id, resp.StatusCode)
	}
	var set struct {
		Rules []struct {
			ID string `json:"id"`
		} `json:"rules"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, r := range set.Rules {
		out[r.ID] = true
	}
	return out, nil
}

// missingWrites counts the acknowledged rule ids that are not in the rule
// set, read through the leader, then from every node's own copy (each
// given until d to catch up).
func (c *cluster) missingWrites(acked []string, d time.Duration) (lost int, err error) {
	deadline := time.Now().Add(d)
	for _, consistent := range []bool{true, false} {
		for _, n := range c.nodes {
			for {
				ids, err := c.ruleIDs(n, consistent)
				miss := 0
				if err == nil {
					for _, id := range acked {
						if !ids[id] {
							miss++
						}
					}
					if miss == 0 {
						break
					}
				}
				if time.Now().After(deadline) {
					if err != nil {
						return 0, err
					}
					return miss, nil
				}
				time.Sleep(200 * time.Millisecond) // poll while a node catches up
			}
		}
	}
	return 0, nil
}

// gate is a fault's load window: loads run until stop is closed or their
// context ends.
type gate struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newGate(max time.Duration) *gate {
	g := &gate{}
	g.ctx, g.cancel = context.WithTimeout(context.Background(), max)
	return g
}

func (g *gate) goFunc(f func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
}

// stop ends the loads and waits for them.
func (g *gate) stop() {
	g.cancel()
	g.wg.Wait()
}

// pace runs f every d until ctx ends or f has run max times.
func pace(ctx context.Context, d time.Duration, max int, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for i := 0; i < max; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}
