package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testbin"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testlog"
	"github.com/weirlimit/weir/internal/testwait"
)

// binPath is the weir binary once weirBin built it (cliErr runs it).
var binPath string

// weirBin builds cmd/weir once per test binary.
func weirBin(t *testing.T) string {
	t.Helper()
	binPath = testbin.Weir(t)
	return binPath
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// proc is one `weir node` process.
type proc struct {
	id, dir                  string
	http, grpc, raft, gossip string
	cmd                      *exec.Cmd
	out                      *testlog.Buffer // written by the process's pipe copier while tests read it
}

func startProc(t *testing.T, p *proc, join string, expect int, extra ...string) {
	t.Helper()
	args := []string{"node", "--id", p.id, "--data-dir", p.dir, "--http", p.http, "--grpc", p.grpc,
		"--raft", p.raft, "--gossip", p.gossip, "--bootstrap-expect", fmt.Sprint(expect), "--log-level", "warn",
		"--cluster-name", testcluster.Name} // gossip apart from other packages' test clusters
	if join != "" {
		args = append(args, "--join", join)
	}
	args = append(args, extra...)
	p.out = &testlog.Buffer{}
	p.cmd = exec.Command(weirBin(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

// newProcs returns n processes named prefix1..prefixN, each with its own
// data dir and loopback addresses, killed at cleanup; startAll starts
// them, the first bootstrapping and the others joining it, each with extra
// flags.
func newProcs(t *testing.T, prefix string, n int) (procs []*proc, startAll func(extra ...string)) {
	t.Helper()
	procs = make([]*proc, n)
	for i := range procs {
		procs[i] = &proc{id: fmt.Sprintf("%s%d", prefix, i+1), dir: t.TempDir(),
			http: freeAddr(t), grpc: freeAddr(t), raft: freeAddr(t), gossip: freeAddr(t)}
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.stop(syscall.SIGKILL)
		}
	})
	return procs, func(extra ...string) {
		for i, p := range procs {
			join := ""
			if i > 0 {
				join = procs[0].gossip
			}
			startProc(t, p, join, n, extra...)
		}
	}
}

func (p *proc) stop(sig syscall.Signal) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}

// cli runs the weir CLI and returns stdout; it fails the test on a non-zero exit.
func cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cliErr(args...)
	if err != nil {
		t.Fatalf("weir %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func cliErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binPath, args...).CombinedOutput()
	return string(out), err
}

type clusterJSON struct {
	Leader       string `json:"leader"`
	RulesVersion uint64 `json:"rules_version"`
	Members      []struct {
		ID string `json:"id"`
	} `json:"members"`
}

func clusterInfo(addr string) (clusterJSON, error) {
	var c clusterJSON
	resp, err := http.Get("http://" + addr + "/v1/cluster")
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&c)
	return c, err
}

// allReady is nil once every node of ps answers /readyz 200, else the
// first one's reason.
func allReady(ps []*proc) error {
	for _, p := range ps {
		if err := ready(p.http); err != nil {
			return err
		}
	}
	return nil
}

func ready(addr string) error {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		why, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: readyz %d: %s", addr, resp.StatusCode, bytes.TrimSpace(why))
	}
	return nil
}

// Three `weir node` processes driven through the CLI: apply a rules file
// through a follower, check, kill the leader and keep writing, then stop
// every node and start them again from their data dirs: rules and history
// are intact. Also measures the leader failover time.
func TestProcessesThroughCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	weirBin(t)
	procs, startAll := newProcs(t, "p", 3)
	startAll()
	waitAll := func(ps []*proc) clusterJSON {
		var info clusterJSON
		// Three nodes started at once take one first ring once their
		// member list settled (clusterview.Settle); the reason a node
		// gives for not being ready is in the error.
		testwait.For(t, 30*time.Second, "the nodes", func() error {
			if err := allReady(ps); err != nil {
				return err
			}
			var err error
			info, err = clusterInfo(ps[0].http)
			if err == nil && info.Leader == "" {
				err = fmt.Errorf("no leader")
			}
			return err
		})
		return info
	}
	info := waitAll(procs)
	follower := procs[0]
	for _, p := range procs {
		if p.id != info.Leader {
			follower = p
			break
		}
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(exactRules), 0o644); err != nil {
		t.Fatal(err)
	}
	// Dry run changes nothing.
	out := cli(t, "rules", "apply", "-f", file, "--dry-run", "--addr", follower.http)
	if !strings.Contains(out, "exact") {
		t.Fatalf("dry run output lacks the diff:\n%s", out)
	}
	out = cli(t, "rules", "apply", "-f", file, "--addr", follower.http)
	t.Logf("apply: %s", strings.TrimSpace(out))
	out = cli(t, "rules", "list", "--consistent", "--addr", procs[2].http)
	for _, id := range []string{"exact", "perminute", "perhour"} {
		if !strings.Contains(out, id) {
			t.Fatalf("rules list lacks %s:\n%s", id, out)
		}
	}
	// A bad file is refused with every problem listed and nothing applied.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("rules:\n  - id: x\n    match: {route: /x}\n    key: nope\n    rate: -1\n    period: 1s\n"), 0o644)
	if out, err := cliErr("rules", "apply", "-f", bad, "--addr", follower.http); err == nil || !strings.Contains(out, "rate") || !strings.Contains(out, "key") {
		t.Fatalf("bad file: err=%v out=%s", err, out)
	}
	for i := 0; i < 100; i++ {
		cli(t, "check", "--key", "apikey:cli", "--rule", "exact", "--addr", procs[i%3].http)
	}
	if out := cli(t, "check", "--key", "apikey:cli", "--rule", "exact", "--addr", procs[1].http); !strings.Contains(out, "DENIED") {
		t.Fatalf("101st check not denied:\n%s", out)
	}
	if out := cli(t, "members", "--addr", procs[0].http); strings.Count(out, "alive") != 3 {
		t.Fatalf("members:\n%s", out)
	}

	// Kill the leader hard and keep writing through the survivors.
	var leader *proc
	var rest []*proc
	for _, p := range procs {
		if p.id == info.Leader {
			leader = p
		} else {
			rest = append(rest, p)
		}
	}
	killed := time.Now()
	leader.stop(syscall.SIGKILL)
	var newLeader string
	testwait.For(t, 30*time.Second, "the nodes", func() error {
		c, err := clusterInfo(rest[0].http)
		if err != nil {
			return err
		}
		if c.Leader == "" || c.Leader == leader.id {
			return fmt.Errorf("leader still %q", c.Leader)
		}
		newLeader = c.Leader
		return nil
	})
	t.Logf("leader failover: %s killed, %s elected after %v", leader.id, newLeader, time.Since(killed).Round(time.Millisecond))
	put := filepath.Join(t.TempDir(), "one.yaml")
	_ = os.WriteFile(put, []byte("id: after-failover\nmatch: {route: /af}\nkey: ip\nrate: 5\nperiod: 1s\n"), 0o644)
	testwait.For(t, 20*time.Second, "a write after failover", func() error {
		out, err := cliErr("rules", "put", "-f", put, "--addr", rest[0].http)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	hist := cli(t, "rules", "history", "--addr", rest[1].http)

	// Stop everything, start again from the data dirs.
	for _, p := range procs {
		p.stop(syscall.SIGTERM)
	}
	startAll()
	waitAll(procs)
	out = cli(t, "rules", "list", "--consistent", "--addr", procs[0].http)
	for _, id := range []string{"exact", "perminute", "perhour", "after-failover"} {
		if !strings.Contains(out, id) {
			t.Fatalf("after restart, rules list lacks %s:\n%s", id, out)
		}
	}
	if h2 := cli(t, "rules", "history", "--addr", procs[0].http); strings.Count(h2, "\n") < strings.Count(hist, "\n") {
		t.Fatalf("history shrank across restart:\nbefore:\n%s\nafter:\n%s", hist, h2)
	}
}
