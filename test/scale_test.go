package test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testwait"
)

// scaleRules: five a day per key, so a key is spent after five checks and
// every later check must be denied, whichever node it goes through.
const scaleRules = `
rules:
  - id: five
    match: {route: /five, method: GET}
    key: apikey
    rate: 5
    period: 24h
`

// ringJSON is what the scale test reads of GET /v1/cluster.
type ringJSON struct {
	Leader      string       `json:"leader"`
	RingVersion uint64       `json:"ring_version"`
	Members     []ringMember `json:"members"`
}

type ringMember struct {
	ID              string `json:"id"`
	State           string `json:"state"`
	PartitionsOwned int    `json:"partitions_owned"`
	RaftRole        string `json:"raft_role"`
}

func ringInfo(addr string) (ringJSON, error) {
	var c ringJSON
	resp, err := http.Get("http://" + addr + "/v1/cluster")
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&c)
	return c, err
}

// oneRing waits until every process in ps is ready and reports the same
// ring (same version, every one of ps a member owning partitions, none
// other) and a leader, and returns it.
func oneRing(t *testing.T, ps []*proc, within time.Duration) ringJSON {
	t.Helper()
	var first ringJSON
	testwait.For(t, within, fmt.Sprintf("one ring of %d", len(ps)), func() error {
		for i, p := range ps {
			if err := ready(p.http); err != nil {
				return err
			}
			c, err := ringInfo(p.http)
			if err != nil {
				return err
			}
			var owners []string
			for _, m := range c.Members {
				if m.PartitionsOwned > 0 {
					owners = append(owners, m.ID)
				}
			}
			if len(owners) != len(ps) || c.Leader == "" {
				return fmt.Errorf("%s: %d members own partitions (%v), leader %q", p.id, len(owners), owners, c.Leader)
			}
			if i == 0 {
				first = c
			} else if c.RingVersion != first.RingVersion {
				return fmt.Errorf("%s has ring %d, %s ring %d", p.id, c.RingVersion, ps[0].id, first.RingVersion)
			}
		}
		return nil
	})
	return first
}

// checkBalance fails unless every member owns within ±25% of the mean
// partitions and at most 5 are Raft voters.
func checkBalance(t *testing.T, c ringJSON) {
	t.Helper()
	var mean float64
	var owned []int
	total := 0
	for _, m := range c.Members {
		total += m.PartitionsOwned
	}
	voters := 0
	members := slices.DeleteFunc(slices.Clone(c.Members), func(m ringMember) bool { return m.State != "alive" })
	mean = float64(total) / float64(len(members))
	for _, m := range members {
		owned = append(owned, m.PartitionsOwned)
		if d := float64(m.PartitionsOwned)/mean - 1; d < -0.25 || d > 0.25 {
			t.Errorf("%s owns %d partitions, %+.0f%% of the mean %.1f", m.ID, m.PartitionsOwned, 100*d, mean)
		}
		if m.RaftRole == "leader" || m.RaftRole == "follower" {
			voters++
		}
	}
	if voters > 5 {
		t.Errorf("%d Raft voters, want at most 5", voters)
	}
	slices.Sort(owned)
	t.Logf("%d members: partitions owned %d..%d (mean %.1f), %d voters", len(members), owned[0], owned[len(owned)-1], mean, voters)
}

// fixedAddr is a free loopback address below the ephemeral port range
// (32768 and up on Linux): sixteen processes dial each other often enough
// that a port freeAddr found free is taken by an outgoing connection before
// its process binds it.
func fixedAddr(t *testing.T) string {
	t.Helper()
	for range 1000 {
		nextPort++
		if nextPort >= 32000 {
			nextPort = 20000
		}
		addr := fmt.Sprintf("127.0.0.1:%d", nextPort)
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr
		}
	}
	t.Fatal("no free port in 20000..32000")
	return ""
}

// nextPort is the last port fixedAddr tried (from a per-process start, so
// parallel test binaries rarely meet).
var nextPort = 20000 + os.Getpid()%10000

// procUsage is a process's CPU time so far (user+system) and resident set.
func procUsage(pid int) (cpu time.Duration, rssKB int, err error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command name (which may hold spaces) in parentheses;
	// utime and stime are fields 14 and 15, in clock ticks (100 a second).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rssKB, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, rssKB, nil
}

// reportIdle logs each process's CPU share over an idle window and its
// RSS, and the mean.
func reportIdle(t *testing.T, ps []*proc, window time.Duration) {
	t.Helper()
	before := make([]time.Duration, len(ps))
	for i, p := range ps {
		before[i], _, _ = procUsage(p.cmd.Process.Pid)
	}
	start := time.Now()
	time.Sleep(window) // the idle window measured, not a wait for an event
	el := time.Since(start)
	var sumCPU float64
	var sumRSS int
	var line []string
	for i, p := range ps {
		cpu, rss, err := procUsage(p.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		pct := 100 * float64(cpu-before[i]) / float64(el)
		sumCPU += pct
		sumRSS += rss
		line = append(line, fmt.Sprintf("%s %.1f%% %d MiB", p.id, pct, rss/1024))
	}
	t.Logf("idle over %v: %s", el.Round(time.Millisecond), strings.Join(line, ", "))
	t.Logf("idle mean per node: %.1f%% of a core, %d MiB RSS (%d nodes)", sumCPU/float64(len(ps)), sumRSS/len(ps)/1024, len(ps))
}

// spendAll checks each key 7 times round-robin over ps: exactly 5 must be
// allowed (exact through every node).
func spendAll(t *testing.T, ps []*proc, keys []string) {
	t.Helper()
	for ki, k := range keys {
		allowed := 0
		for j := range 7 {
			p := ps[(ki+j)%len(ps)]
			var ok bool
			testwait.For(t, 10*time.Second, "an answer", func() error {
				a, answered, err := httpCheck(p.http, "five", k)
				if err == nil && !answered {
					err = fmt.Errorf("%s did not answer", p.id)
				}
				ok = a
				return err
			})
			if ok {
				allowed++
			}
		}
		if allowed != 5 {
			t.Fatalf("key %s: %d of 7 allowed through %d nodes, want exactly 5", k, allowed, len(ps))
		}
	}
}

// noneAdmitted checks each spent key once through the next of ps: none may
// be allowed.
func noneAdmitted(t *testing.T, ps []*proc, keys []string, when string) {
	t.Helper()
	admitted := 0
	for ki, k := range keys {
		p := ps[ki%len(ps)]
		testwait.For(t, 20*time.Second, "an answer", func() error {
			a, answered, err := httpCheck(p.http, "five", k)
			if err == nil && !answered {
				err = fmt.Errorf("%s did not answer", p.id)
			}
			if a {
				admitted++
			}
			return err
		})
	}
	if admitted > 0 {
		t.Fatalf("%s: %d of %d spent keys admitted", when, admitted, len(keys))
	}
	t.Logf("%s: 0 of %d spent keys admitted", when, len(keys))
}

// Sixteen `weir node` processes on loopback (make scale; WEIR_SCALE=1),
// started at once: one ring within 60 s, every member within ±25% of the
// mean partitions, at most 5 Raft voters, exact through every node, still exact after one
// SIGKILL and after a new member joins; idle CPU and RSS per node are
// logged from /proc.
func TestSixteenProcesses(t *testing.T) {
	if os.Getenv("WEIR_SCALE") == "" {
		t.Skip("16 processes: make scale (WEIR_SCALE=1)")
	}
	weirBin(t)
	extra := strings.Fields(os.Getenv("WEIR_SCALE_FLAGS")) // e.g. another ring shape, to compare
	procs, _ := newProcs(t, "n", 17)
	for _, p := range procs {
		p.http, p.grpc, p.raft, p.gossip = fixedAddr(t), fixedAddr(t), fixedAddr(t), fixedAddr(t)
	}
	ps, joiner := procs[:16], procs[16]
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range procs {
				if p.out != nil {
					out := p.out.String()
					t.Logf("%s output (last 2000 bytes):\n%s", p.id, out[max(0, len(out)-2000):])
				}
			}
		}
	})
	// All sixteen start at once: three bootstrap Raft, the others join
	// (no --bootstrap-expect). Their first rings wait for the member list
	// to settle (clusterview.Settle), so they take one ring.
	start := time.Now()
	for i, p := range ps {
		join, expect := "", 3
		if i > 0 {
			join = ps[0].gossip
		}
		if i >= 3 {
			expect = 0
		}
		startProc(t, p, join, expect, extra...)
	}
	c := oneRing(t, ps, 60*time.Second)
	t.Logf("one ring of 16 after %v", time.Since(start).Round(time.Millisecond))
	checkBalance(t, c)
	reportIdle(t, ps, 5*time.Second)

	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(scaleRules), 0o644); err != nil {
		t.Fatal(err)
	}
	cli(t, "rules", "apply", "-f", file, "--addr", ps[1].http)
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	testwait.For(t, 20*time.Second, "the rule on every node", func() error {
		for _, p := range ps {
			if _, answered, err := httpCheck(p.http, "five", "probe"); err != nil || !answered {
				return fmt.Errorf("%s: %v", p.id, err)
			}
		}
		return nil
	})
	spendAll(t, ps, keys)

	// SIGKILL one member that is not the Raft leader.
	victim := ps[len(ps)-1]
	if victim.id == c.Leader {
		victim = ps[len(ps)-2]
	}
	victim.stop(syscall.SIGKILL)
	var rest []*proc
	for _, p := range ps {
		if p != victim {
			rest = append(rest, p)
		}
	}
	oneRing(t, rest, 30*time.Second)
	noneAdmitted(t, rest, keys, "after SIGKILL of "+victim.id)

	startProc(t, joiner, ps[0].gossip, 0, extra...)
	rest = append(rest, joiner)
	c = oneRing(t, rest, 30*time.Second)
	checkBalance(t, c)
	noneAdmitted(t, rest, keys, "after "+joiner.id+" joined")
}
