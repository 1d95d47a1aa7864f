package test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testwait"
)

// killCycles is how many "write, SIGKILL, restart" cycles
// TestKillCyclesLoseNoWrite runs: 6 by default (make test), more with
// WEIR_KILL_CYCLES (e.g. 100, the long version).
func killCycles() int {
	if n, err := strconv.Atoi(os.Getenv("WEIR_KILL_CYCLES")); err == nil && n > 0 {
		return n
	}
	return 6
}

// Cycles of "write a rule, SIGKILL the leader (every other cycle a random
// node) right after the write is acknowledged, restart it from its data
// dir" on three `weir node` processes: no acknowledged write is lost, and
// every node converges to the same rules version holding every one of them.
func TestKillCyclesLoseNoWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	procs, hc := startProcs(t, "k")
	leaderOf := func() *proc {
		if i := leaderIndex(procs); i >= 0 {
			return procs[i]
		}
		return nil
	}
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	acked := map[string]uint64{} // rule id -> the version its write answered
	cycles := killCycles()
	start := time.Now()
	for cycle := range cycles {
		id := fmt.Sprintf("cycle-%03d", cycle)
		var version uint64
		// Write through any live node until one acknowledges (a write
		// that fails is not acknowledged and may or may not be applied).
		testwait.For(t, 30*time.Second, "an acknowledged write of "+id, func() error {
			p := procs[rng.IntN(len(procs))]
			if p.cmd == nil {
				return fmt.Errorf("%s is down", p.id)
			}
			v, err := putBody(hc, p.http, id, fmt.Sprintf(`{"match":{"route":"/%s"},"key":"ip","rate":5,"period":"1s"}`, id))
			version = v
			return err
		})
		acked[id] = version
		victim := leaderOf()
		if victim == nil || cycle%2 == 1 {
			victim = procs[rng.IntN(len(procs))]
		}
		victim.stop(syscall.SIGKILL)
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond) // down a little while
		join := procs[0].gossip
		if victim == procs[0] {
			join = procs[1].gossip
		}
		startProc(t, victim, join, 3)
	}
	t.Logf("%d cycles in %v", cycles, time.Since(start).Round(time.Millisecond))

	// Every node converges to one version that holds every acknowledged write.
	testwait.For(t, 60*time.Second, "every node at one version with every acknowledged write", func() error {
		var first uint64
		for _, p := range procs {
			ids, version, err := localRules(hc, p.http)
			if err != nil {
				return fmt.Errorf("%s: %v", p.id, err)
			}
			if first == 0 {
				first = version
			} else if version != first {
				return fmt.Errorf("%s at version %d, another node at %d", p.id, version, first)
			}
			for id, v := range acked {
				if !ids[id] {
					return fmt.Errorf("%s (version %d) lacks %s, acknowledged at version %d", p.id, version, id, v)
				}
			}
		}
		return nil
	})
}

// localRules reads the rule ids and version a node holds itself (a stale,
// local read: convergence is what is asked).
func localRules(hc *http.Client, addr string) (map[string]bool, uint64, error) {
	resp, err := hc.Get("http://" + addr + "/v1/rules?stale=true")
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Version uint64 `json:"version"`
		Rules   []struct {
			ID string `json:"id"`
		} `json:"rules"`
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("GET /v1/rules: %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, 0, err
	}
	ids := make(map[string]bool, len(out.Rules))
	for _, r := range out.Rules {
		ids[r.ID] = true
	}
	return ids, out.Version, nil
}
