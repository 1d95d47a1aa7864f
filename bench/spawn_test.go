package bench

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testlog"

	"github.com/weirlimit/weir/internal/testbin"
)

// weirBin builds cmd/weir once per test binary: spawning runs the real
// node.
func weirBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("spawns weir node processes")
	}
	return testbin.Weir(t)
}

// racePicker hands out taken (an address the test holds) as the HTTP
// address of node b2 (the fourth TCP pick of a cluster: b1's HTTP, gRPC and
// Raft come first) in the first `attempts` clusters it serves, and free
// ports otherwise: b2 loses the port race as it would to another process
// binding the port between freePort and the child's listen.
func racePicker(taken string, attempts int) func() (string, error) {
	var mu sync.Mutex
	calls := 0
	return func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		const perCluster = 9 // 3 nodes × HTTP, gRPC, Raft
		if (calls-1)%perCluster == 3 && (calls-1)/perCluster < attempts {
			return taken, nil
		}
		return freePort()
	}
}

// holdPort listens on a loopback port until the test ends: a port a
// spawned node loses the race for.
func holdPort(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// A node whose port was taken exits at start-up; the two others then never
// see bootstrap-expect members, so there is never a Raft leader, and the
// spawn used to wait out its minute reporting the first node's /readyz
// ("503 not ready: no raft leader yet") instead of the exit. It now starts
// the cluster afresh with new ports.
func TestSpawnClusterRetriesALostPortRace(t *testing.T) {
	bin := weirBin(t)
	taken := holdPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out testlog.Buffer
	s, err := spawnCluster(ctx, bin, 3, &out, SpawnOptions{pick: racePicker(taken.Addr().String(), 1)}, nil, "")
	if err != nil {
		t.Fatalf("spawn: %v\nnode output:\n%s", err, out.String())
	}
	defer s.Close()
	if !strings.Contains(out.String(), "address already in use") {
		t.Fatalf("node b2 of the first attempt did not lose the port race; output:\n%s", out.String())
	}
	nodes := s.Nodes()
	if len(nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(nodes))
	}
	for _, n := range nodes {
		if n.HTTP == taken.Addr().String() {
			t.Fatalf("node %s kept the taken address %s", n.ID, n.HTTP)
		}
	}
}

// When every attempt loses the race, the error names the node that exited
// and why, rather than a readiness timeout of one that waits for it.
func TestSpawnClusterReportsTheNodeThatExited(t *testing.T) {
	bin := weirBin(t)
	taken := holdPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var err error
	// Another process may also take a fresh port picked for b1 or b3 (CI
	// runs packages side by side): the error then rightly names that
	// node, and the scenario is run again.
	for try := 1; ; try++ {
		var s *Spawned
		s, err = spawnCluster(ctx, bin, 3, nil, SpawnOptions{pick: racePicker(taken.Addr().String(), spawnAttempts)}, nil, "")
		if err == nil {
			s.Close()
			t.Fatal("spawn succeeded with node b2's port taken in every attempt")
		}
		if strings.Contains(err.Error(), "node b2 exited") || try == 3 {
			break
		}
		t.Logf("try %d: another node lost a port race of its own: %v", try, err)
	}
	if !errors.Is(err, ErrSpawn) || !errors.Is(err, errPortTaken) {
		t.Fatalf("error %v: want ErrSpawn and errPortTaken", err)
	}
	for _, want := range []string{"node b2 exited", "address already in use", taken.Addr().String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "not ready within") {
		t.Errorf("error %q is a readiness timeout, not the exit", err)
	}
}

// The kernel may hand a just-released port out again before the node it
// was picked for has bound it: a cluster never gives one address twice.
func TestSpawnedPortNeverRepeats(t *testing.T) {
	seq := []string{"127.0.0.1:1001", "127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1001", "127.0.0.1:1003"}
	pick := func() (string, error) {
		a := seq[0]
		seq = seq[1:]
		return a, nil
	}
	s := &Spawned{picked: map[string]bool{}}
	var got []string
	for range 3 {
		a, err := s.port(pick)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a)
	}
	if want := "127.0.0.1:1001 127.0.0.1:1002 127.0.0.1:1003"; strings.Join(got, " ") != want {
		t.Fatalf("ports %v, want %s", got, want)
	}
}
