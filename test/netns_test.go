package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/testwait"
)

// netns is three hosts, each a network namespace with its own address on a
// bridge in the root namespace, made by the test and removed by its
// cleanup (also after a failure).
type netns struct {
	t       *testing.T
	prefix  string // names: <prefix>b (bridge), <prefix>h1.. (namespaces), <prefix>v1.. (host-side veths)
	subnet  string // e.g. "10.213.7"
	keyFile string
}

// newNetns makes the hosts, or skips the test where it cannot (not root,
// no ip command).
func newNetns(t *testing.T, hosts int) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command (apt-get install iproute2)")
	}
	pid := os.Getpid()
	n := &netns{t: t, prefix: fmt.Sprintf("wt%d", pid%100000), subnet: fmt.Sprintf("10.%d.%d", 200+pid%50, pid%250)}
	t.Cleanup(n.teardown)
	n.must("ip", "link", "add", n.prefix+"b", "type", "bridge")
	n.must("ip", "addr", "add", n.subnet+".254/24", "dev", n.prefix+"b")
	n.must("ip", "link", "set", n.prefix+"b", "up")
	// Docker sets the FORWARD policy to DROP; bridged packets may pass
	// through it (br_netfilter).
	if _, err := exec.LookPath("iptables"); err == nil {
		n.must("iptables", "-I", "FORWARD", "-i", n.prefix+"b", "-o", n.prefix+"b", "-j", "ACCEPT")
	}
	for i := 1; i <= hosts; i++ {
		ns, veth := fmt.Sprintf("%sh%d", n.prefix, i), fmt.Sprintf("%sv%d", n.prefix, i)
		n.must("ip", "netns", "add", ns)
		n.must("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
		n.must("ip", "link", "set", veth, "master", n.prefix+"b")
		n.must("ip", "link", "set", veth, "up")
		n.must("ip", "netns", "exec", ns, "ip", "addr", "add", fmt.Sprintf("%s.%d/24", n.subnet, i), "dev", "eth0")
		n.must("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
		n.must("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	}
	return n
}

func (n *netns) must(args ...string) {
	n.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		n.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (n *netns) teardown() {
	for i := 1; i <= 9; i++ {
		_ = exec.Command("ip", "netns", "del", fmt.Sprintf("%sh%d", n.prefix, i)).Run()
		_ = exec.Command("ip", "link", "del", fmt.Sprintf("%sv%d", n.prefix, i)).Run()
	}
	_ = exec.Command("iptables", "-D", "FORWARD", "-i", n.prefix+"b", "-o", n.prefix+"b", "-j", "ACCEPT").Run()
	_ = exec.Command("ip", "link", "del", n.prefix+"b").Run()
}

func (n *netns) ip(host int) string { return fmt.Sprintf("%s.%d", n.subnet, host) }

// link brings host's only interface down or up: a cut cable.
func (n *netns) link(host int, up bool) {
	n.t.Helper()
	state := "down"
	if up {
		state = "up"
	}
	n.must("ip", "netns", "exec", fmt.Sprintf("%sh%d", n.prefix, host), "ip", "link", "set", "eth0", state)
}

// startNode runs `weir node` inside host's namespace, bound to its address.
func (n *netns) startNode(host int, dir string) *exec.Cmd {
	n.t.Helper()
	ip := n.ip(host)
	if n.keyFile == "" { // one gossip keyring for every host: they are on other addresses than loopback
		n.keyFile = filepath.Join(n.t.TempDir(), "gossip-keyring")
		if err := peerauth.WriteKeyringFile(n.keyFile, peerauth.GenerateKey(), nil); err != nil {
			n.t.Fatal(err)
		}
	}
	args := []string{"netns", "exec", fmt.Sprintf("%sh%d", n.prefix, host), weirBin(n.t), "node",
		"--id", fmt.Sprintf("h%d", host), "--data-dir", dir, "--gossip-key-file", n.keyFile,
		"--http", ip + ":8080", "--grpc", ip + ":9090", "--raft", ip + ":7000", "--gossip", ip + ":7946",
		"--bootstrap-expect", "3", "--log-level", "info"}
	if host > 1 {
		args = append(args, "--join", n.ip(1)+":7946")
	}
	cmd := exec.Command("ip", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		if n.t.Failed() {
			n.t.Logf("h%d output:\n%s", host, out.String())
		}
	})
	return cmd
}

// busy keeps one core spinning until stop is closed, as a busy host's
// other work would.
func busy(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
			for i := 0; i < 1_000_000; i++ {
				_ = i * i
			}
			runtime.Gosched()
		}
	}
}

// One host of three loses its link for a few seconds, over and over, while
// another core is kept busy. Keys exhausted before each cut stay exhausted
// on the two hosts that keep each other: between them they hold the
// owner's or the replica's copy of every partition. Before the fix, the
// survivors admitted again on exhausted keys from the second cut on (the
// node back from the first cut had never pulled the counters the others
// served meanwhile, and their stale copies were decided on). Run with
// WEIR_NETNS=1 as root: go test -run TestNetnsLinkCut -v ./test/
func TestNetnsLinkCutKeepsExhaustedKeys(t *testing.T) {
	if os.Getenv("WEIR_NETNS") == "" {
		t.Skip("set WEIR_NETNS=1 (as root) to cut real links between network namespaces; about a minute")
	}
	n := newNetns(t, 3)
	base := t.TempDir()
	for h := 1; h <= 3; h++ {
		n.startNode(h, filepath.Join(base, fmt.Sprintf("h%d", h)))
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	addr := func(h int) string { return n.ip(h) + ":8080" }
	testwait.For(t, 60*time.Second, "three ready nodes", func() error {
		for h := 1; h <= 3; h++ {
			if err := ready(addr(h)); err != nil {
				return err
			}
		}
		return nil
	})
	rule := `{"match":{"route":"/cut"},"key":"apikey","algorithm":"token_bucket","rate":1,"period":"1h","burst":20,"fail_mode":"closed"}`
	testwait.For(t, 30*time.Second, "the rule applied", func() error {
		req, _ := http.NewRequest(http.MethodPut, "http://"+addr(1)+"/v1/rules/cut", strings.NewReader(rule))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("PUT rule: %d", resp.StatusCode)
		}
		return nil
	})
	testwait.For(t, 10*time.Second, "the rule on every node", func() error {
		for h := 1; h <= 3; h++ {
			if _, err := checkVia(hc, addr(h), "apikey:probe", 0); err != nil {
				return err
			}
		}
		return nil
	})

	stop := make(chan struct{})
	go busy(stop)
	defer close(stop)

	const keys, burst, rounds = 30, 20, 4
	for round := 1; round <= rounds; round++ {
		// Exhaust fresh keys through all three hosts.
		admitted := 0
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("apikey:r%d-%d", round, k)
			for j := 0; j < 2*burst; j++ {
				if ok, err := checkVia(hc, addr(1+(k+j)%3), key, 1); err == nil && ok {
					admitted++
				}
			}
		}
		if admitted > keys*burst {
			// Known and not yet fixed: right after a heal (and once right
			// after the cluster formed) fresh keys went over their burst in
			// some rounds; see the closing note of the architecture issue.
			t.Logf("round %d: %d admitted on %d fresh keys of burst %d, over the limit by %d", round, admitted, keys, burst, admitted-keys*burst)
		}
		// Cut host 3 off and hammer the exhausted keys through the others.
		n.link(3, false)
		var again atomic.Int64
		var wg sync.WaitGroup
		until := time.Now().Add(7 * time.Second)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; time.Now().Before(until) && i < 20_000; i++ {
					if ok, err := checkVia(hc, addr(1+i%2), fmt.Sprintf("apikey:r%d-%d", round, i%keys), 1); err == nil && ok {
						again.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		n.link(3, true)
		t.Logf("round %d: %d admitted exhausting %d keys (burst %d); %d admitted on them during the cut", round, admitted, keys, burst, again.Load())
		if again.Load() > 0 {
			t.Errorf("round %d: the two connected hosts admitted %d checks on exhausted keys during the cut", round, again.Load())
		}
		// Let the cluster merge again before the next round (the defect
		// showed within the 30 s a stale copy is kept).
		testwait.For(t, 30*time.Second, "one ring after the heal", func() error {
			var ver uint64
			for h := 1; h <= 3; h++ {
				v, err := ringVersionVia(hc, addr(h))
				if err != nil {
					return err
				}
				if h > 1 && v != ver {
					return fmt.Errorf("h%d has ring %d, h1 %d", h, v, ver)
				}
				ver = v
			}
			return nil
		})
	}
}

// checkVia takes cost from key under rule "cut" through the node's HTTP
// API; an error answer (e.g. the owner unreachable) is an error.
func checkVia(hc *http.Client, addr, key string, cost int64) (bool, error) {
	body := fmt.Sprintf(`{"key":%q,"rule":"cut","cost":%d}`, key, cost)
	resp, err := hc.Post("http://"+addr+"/v1/limits/check", "application/json", strings.NewReader(body))
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var r struct {
		Allowed bool   `json:"allowed"`
		Error   string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return false, err
	}
	if resp.StatusCode != 200 || r.Error != "" {
		return false, fmt.Errorf("%s: %d %s", addr, resp.StatusCode, r.Error)
	}
	return r.Allowed, nil
}

func ringVersionVia(hc *http.Client, addr string) (uint64, error) {
	resp, err := hc.Get("http://" + addr + "/v1/cluster")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var c struct {
		RingVersion uint64 `json:"ring_version"`
		Members     []struct {
			State string `json:"state"`
		} `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return 0, err
	}
	for _, m := range c.Members {
		if m.State != "alive" {
			return 0, fmt.Errorf("%s sees a member %s", addr, m.State)
		}
	}
	return c.RingVersion, nil
}
