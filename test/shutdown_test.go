package test

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testwait"
)

// startPair starts two `weir node` processes (bootstrap 2) with a long
// --leave-timeout and waits until both are ready and `weir health` says
// SERVING for both.
func startPair(t *testing.T) (a, b *proc) {
	t.Helper()
	weirBin(t)
	a = &proc{id: "s1", dir: t.TempDir(), http: freeAddr(t), grpc: freeAddr(t), raft: freeAddr(t), gossip: freeAddr(t)}
	b = &proc{id: "s2", dir: t.TempDir(), http: freeAddr(t), grpc: freeAddr(t), raft: freeAddr(t), gossip: freeAddr(t)}
	t.Cleanup(func() {
		for _, p := range []*proc{a, b} {
			if p.cmd != nil && p.cmd.Process != nil {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
			}
			p.stop(syscall.SIGKILL)
		}
	})
	startProc(t, a, "", 2, "--leave-timeout", "30s")
	startProc(t, b, a.gossip, 2, "--leave-timeout", "30s")
	testwait.For(t, 30*time.Second, "two ready nodes", func() error {
		for _, p := range []*proc{a, b} {
			if err := ready(p.http); err != nil {
				return err
			}
			if out, err := cliErr("health", "--addr", p.grpc); err != nil || strings.TrimSpace(out) != "SERVING" {
				return errors.New("weir health: " + out)
			}
		}
		return nil
	})
	return a, b
}

// wait waits up to d for p to exit and returns how long it took and its
// exit code.
func waitExit(t *testing.T, p *proc, d time.Duration) (time.Duration, int) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		p.cmd = nil
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return time.Since(start), ee.ExitCode()
		}
		return time.Since(start), 0
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v; output:\n%s", p.id, d, p.out)
		return 0, 0
	}
}

// SIGTERM leaves gracefully within --leave-timeout, and does not wait all
// of it when the peer that should take the partitions is gone: here it
// was killed (SIGKILL) just before, so gossip still lists it as alive.
// `weir health` exits 1 for the dead node.
func TestSigtermWithPeerGoneExitsEarly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes")
	}
	a, b := startPair(t)
	b.stop(syscall.SIGKILL)
	if out, err := cliErr("health", "--addr", b.grpc); err == nil {
		t.Fatalf("weir health on a killed node exited 0: %s", out)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	took, code := waitExit(t, a, 20*time.Second)
	if code != 0 || took > 8*time.Second {
		t.Fatalf("exit %d after %v with its peer killed (--leave-timeout 30s); want 0 well before the timeout; output:\n%s", code, took, a.out)
	}
	t.Logf("SIGTERM with the peer killed: exited after %v (--leave-timeout 30s)", took.Round(time.Millisecond))
}

// A second SIGTERM (or SIGINT) while a node is leaving exits at once: the
// peer is frozen (SIGSTOP), so the first SIGTERM's leave would wait for it.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes")
	}
	a, b := startPair(t)
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the leave to start (health NOT_SERVING)", func() error {
		if out, err := cliErr("health", "--addr", a.grpc); err == nil {
			return errors.New(out)
		}
		return nil
	})
	start := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_, code := waitExit(t, a, 10*time.Second)
	took := time.Since(start)
	if code != 1 || took > time.Second || !strings.Contains(a.out.String(), "again: exiting at once") {
		t.Fatalf("second signal: exit %d after %v; want 1 at once; output:\n%s", code, took, a.out)
	}
	t.Logf("second signal: exited after %v", took.Round(time.Millisecond))
}
