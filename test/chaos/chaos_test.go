//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/ring"
)

// The rules the suite checks against. Hot keys refill (20/s, burst 40) and
// get 100 checks/s each; held keys do not refill within the run (1 per
// hour, burst 3) and are spent before each fault; the SDK's keys fail open
// (so a check the cluster cannot answer is still answered, by the fail
// mode). Fail-closed rules make a check the cluster cannot answer a denial,
// never an admission, on the direct paths.
const (
	hotRate, hotBurst = 20, 40
	heldBurst         = 3
	chaosRules        = `
rules:
  - {id: chaos.hot, match: {route: /chaos/hot}, key: apikey, rate: 20, period: 1s, burst: 40, fail_mode: closed, timeout: 200ms}
  - {id: chaos.held, match: {route: /chaos/held}, key: apikey, rate: 1, period: 1h, burst: 3, fail_mode: closed, timeout: 200ms}
  - {id: chaos.sdk, match: {route: /chaos/sdk}, key: apikey, rate: 100, period: 1s, burst: 100, fail_mode: open, timeout: 100ms}
`
)

// Load sizes, each bounded in rate, count and time.
const (
	heldKeys     = 24                     // per fault, the same three kinds, 8 each
	hotEvery     = 10 * time.Millisecond  // per hot key: 100 checks/s
	sdkWorkers   = 4                      // each 50 checks/s through the SDK
	sdkEvery     = 20 * time.Millisecond  //
	writeEvery   = 300 * time.Millisecond // one rule write
	proveEvery   = time.Second            // each held key once, through a usable node
	maxFaultLoad = 2 * time.Minute        // no load outlives this
	maxChecks    = 12000                  // per load goroutine
)

// hotKeys is how many hot keys each fault hammers: a third owned by the
// target, a third it replicates, a third it holds no copy of. 6, times
// WEIR_CHAOS_LOAD (default 1) for a heavier run.
var hotKeys = 6 * loadFactor()

func loadFactor() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("WEIR_CHAOS_LOAD"), &n); err != nil || n < 1 {
		return 1
	}
	return min(n, 8)
}

// row is one line of the table.
type row struct {
	fault                     string
	acked, lost               int
	admitted, ideal, over     float64 // hot keys, summed
	bound                     float64
	boundText                 string
	sdkNode, sdkFail, sdkErr  int64         // during the fault
	detect, heal              time.Duration // -1: not measured
	heldDuring, heldAfter     int           // re-admissions of spent held keys
	heldCutSide               int           // cut: on the cut node, keys it holds a copy of
	heldCutProbed             int
	cutAdmitted, cutAllow     float64       // cut: hot keys admitted by the majority while cut, and refill + window
	cutSideCopy, cutAllowCopy float64       // cut: by the cut node on hot keys it holds a copy of, and refill + window
	cutSideNone, cutAllowNone float64       // cut: by the cut node on hot keys it holds no copy of, and a full limit
	cutDetect                 time.Duration // cut: until the cut node's ring has itself alone (-1: not within the cut)
	countersByDesign          bool          // full stop: counters are in memory, reset by design
	note                      string
}

func (r row) answered() float64 {
	all := r.sdkNode + r.sdkFail + r.sdkErr
	if all == 0 {
		return math.NaN()
	}
	return float64(r.sdkNode+r.sdkFail) / float64(all)
}

// faultRun is one fault being measured.
type faultRun struct {
	c        *cluster
	name     string
	keys     string // unique per fault run: names its keys and rules
	target   *cnode
	hot      []string
	hotCopy  map[string]bool // hot key -> the target holds a copy (owner or replica)
	held     []string
	heldCopy map[string]bool // held key -> the target holds a copy (owner or replica)
	g        *gate
	cutOff   atomic.Pointer[cnode] // while set, a side of its own: also checked directly

	mu     sync.Mutex
	events map[string][]event // hot key -> its answered checks

	inFault            atomic.Bool
	sdkNode, sdkFail   atomic.Int64
	sdkErr             atomic.Int64
	acked              []string
	ackedMu            sync.Mutex
	heldDuring         atomic.Int64
	heldCutSide        atomic.Int64
	heldCutProbed      atomic.Int64
	faultStart, healed time.Time
	r                  row
}

type event struct {
	sent, at time.Time // the check was sent at sent and answered at at
	allowed  bool
	cutSide  bool // decided by the node cut off (cut fault)
}

// keysFor picks n keys named prefix-i: a third owned by target, a third
// it replicates, a third it holds no copy of (by the ring every node
// computes from the three ids), and reports which it holds a copy of.
func keysFor(prefix string, n int, target *cnode, ids []string) ([]string, map[string]bool) {
	r, err := ring.New(ids, ring.DefaultConfig())
	if err != nil {
		panic(err)
	}
	var owned, replica, none []string
	copyOf := map[string]bool{}
	for i := 0; len(owned)+len(replica)+len(none) < n; i++ {
		if i > 100000 {
			panic("keysFor: no keys of every kind")
		}
		k := fmt.Sprintf("%s-%d", prefix, i)
		// The nodes place the checked key, "apikey:" and the name.
		rs := r.Replicas("apikey:"+k, r.Config().Replicas) // the owner, then its replicas (the copies)
		switch {
		case rs[0] == target.id && len(owned) < n/3:
			owned = append(owned, k)
			copyOf[k] = true
		case rs[0] != target.id && slices.Contains(rs, target.id) && len(replica) < n/3:
			replica = append(replica, k)
			copyOf[k] = true
		case !slices.Contains(rs, target.id) && len(none) < n-2*(n/3):
			none = append(none, k)
		}
	}
	return slices.Concat(owned, replica, none), copyOf
}

// spendHeld takes every token of the held keys (burst 3) through usable
// nodes and checks that the next one is denied.
func (f *faultRun) spendHeld(t *testing.T) {
	for _, k := range f.held {
		allowed := 0
		for range heldBurst + 1 {
			n := f.c.pick()
			ok, err := f.c.check(n, "apikey:"+k, "chaos.held")
			for tries := 0; err != nil && tries < 60; tries++ { // up to 6 s
				time.Sleep(100 * time.Millisecond) // retry pace
				ok, err = f.c.check(f.c.pick(), "apikey:"+k, "chaos.held")
			}
			if err != nil {
				t.Fatalf("%s: spending %s: %v", f.name, k, err)
			}
			if ok {
				allowed++
			}
		}
		if allowed != heldBurst {
			t.Errorf("%s: %s admitted %d of %d checks on a fresh key, want exactly the burst %d", f.name, k, allowed, heldBurst+1, heldBurst)
		}
	}
	// The copies have it: a failover may lose the replication window, and
	// this key's spent state must not be in it (under load, shipping can
	// lag well past its 5 ms interval).
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range f.c.nodes {
		for {
			v, err := f.c.metric(n, "weir_replication_pending")
			if (err == nil && v == 0) || time.Now().After(deadline) {
				if err != nil || v != 0 {
					t.Logf("%s: %s still has %v states to replicate (%v)", f.name, n.id, v, err)
				}
				break
			}
			time.Sleep(20 * time.Millisecond) // poll pace
		}
	}
}

// startLoads starts the hot keys' checks, the SDK's checks, the rule
// writer and the held keys' prober; they end with f.g.
func (f *faultRun) startLoads(t *testing.T, sdk *client.Client) {
	for _, k := range f.hot {
		f.g.goFunc(func() {
			pace(f.g.ctx, hotEvery, maxChecks, func() {
				if n := f.c.pick(); n != nil {
					sent := time.Now()
					if ok, err := f.c.check(n, "apikey:"+k, "chaos.hot"); err == nil {
						f.record(k, event{sent, time.Now(), ok, false})
					}
				}
			})
		})
		// A node cut off gets a client of its own side, at half the rate.
		f.g.goFunc(func() {
			pace(f.g.ctx, 2*hotEvery, maxChecks, func() {
				if n := f.cutOff.Load(); n != nil {
					sent := time.Now()
					if ok, err := f.c.check(n, "apikey:"+k, "chaos.hot"); err == nil {
						f.record(k, event{sent, time.Now(), ok, true})
					}
				}
			})
		})
	}
	for w := range sdkWorkers {
		f.g.goFunc(func() {
			i := w
			pace(f.g.ctx, sdkEvery, maxChecks, func() {
				i += sdkWorkers
				ctx, cancel := context.WithTimeout(f.g.ctx, 2*time.Second)
				d, err := sdk.CheckKey(ctx, fmt.Sprintf("sdk-%s-%d", f.keys, i%64), 1, "chaos.sdk")
				cancel()
				if !f.inFault.Load() {
					return
				}
				switch {
				case err != nil:
					f.sdkErr.Add(1)
				case len(d.Limits) > 0 && d.Limits[0].Fallback:
					f.sdkFail.Add(1)
				default:
					f.sdkNode.Add(1)
				}
			})
		})
	}
	f.g.goFunc(func() {
		i := 0
		pace(f.g.ctx, writeEvery, 400, func() {
			n := f.c.pick()
			if n == nil {
				return
			}
			id := fmt.Sprintf("chaos.w.%s.%d", f.keys, i)
			i++
			if f.c.putRule(n, id) {
				f.ackedMu.Lock()
				f.acked = append(f.acked, id)
				f.ackedMu.Unlock()
			}
		})
	})
	f.g.goFunc(func() {
		pace(f.g.ctx, proveEvery, 200, func() {
			if !f.inFault.Load() {
				return
			}
			for _, k := range f.held {
				if n := f.c.pick(); n != nil {
					if ok, err := f.c.check(n, "apikey:"+k, "chaos.held"); err == nil && ok {
						f.heldDuring.Add(1)
						t.Logf("%s: spent key %s (%s) admitted again during the fault (through %s at %s)", f.name, k, f.kindOf(k), n.id, time.Now().UTC().Format("15:04:05.000"))
					}
				}
				// The cut side is asked only about keys it holds a copy of:
				// one it holds no copy of may start from a full bucket (the
				// split bound), and is left untouched.
				if n := f.cutOff.Load(); n != nil && f.heldCopy[k] {
					ok, err := f.c.check(n, "apikey:"+k, "chaos.held")
					if err != nil {
						continue // its owner is across the cut and not yet declared dead
					}
					f.heldCutProbed.Add(1)
					if ok {
						f.heldCutSide.Add(1)
						t.Logf("%s: spent key %s admitted again on the cut side (%s holds a copy)", f.name, k, n.id)
					}
				}
			}
		})
	})
}

// kindOf says how the fault's target relates to held key k: it owns
// the key's partition, holds its replica copy, or holds no copy.
func (f *faultRun) kindOf(k string) string {
	i := slices.Index(f.held, k)
	switch {
	case i < 0:
		return "not a held key"
	case i < heldKeys/3:
		return "owned by " + f.target.id
	case f.heldCopy[k]:
		return "replicated on " + f.target.id
	default:
		return "no copy on " + f.target.id
	}
}

func (f *faultRun) record(k string, e event) {
	f.mu.Lock()
	f.events[k] = append(f.events[k], e)
	f.mu.Unlock()
}

// beginFault and endFault bracket the fault for the SDK's answered share
// and the held keys' prober.
func (f *faultRun) beginFault() { f.faultStart = time.Now(); f.inFault.Store(true) }
func (f *faultRun) endFault()   { f.healed = time.Now(); f.inFault.Store(false) }

// measure runs one fault: spend the held keys, start the loads, warm up
// 2 s (the hot keys spend their burst), inject (body), run 2 s more, stop
// the loads, then check the writes, the held keys through every node and
// the hot keys' admissions against their ideal.
func measure(t *testing.T, c *cluster, sdk *client.Client, name, keys string, target *cnode, body func(f *faultRun)) row {
	t.Logf("=== %s (target %s)", name, target.id)
	ids := []string{"n1", "n2", "n3"}
	f := &faultRun{c: c, name: name, keys: keys, target: target, events: map[string][]event{}, g: newGate(maxFaultLoad)}
	f.hot, f.hotCopy = keysFor("hot-"+keys, hotKeys, target, ids)
	f.held, f.heldCopy = keysFor("held-"+keys, heldKeys, target, ids)
	f.r = row{fault: name, detect: -1, heal: -1}
	f.spendHeld(t)
	f.startLoads(t, sdk)
	time.Sleep(2 * time.Second) // warm-up load
	body(f)
	time.Sleep(2 * time.Second) // load after recovery
	f.g.stop()
	c.setUsable(c.nodes...)

	f.r.acked = len(f.acked)
	lost, err := c.missingWrites(f.acked, 30*time.Second)
	if err != nil {
		t.Errorf("%s: reading the rules back: %v", name, err)
	}
	f.r.lost = lost
	f.r.heldDuring = int(f.heldDuring.Load())
	f.r.heldCutSide, f.r.heldCutProbed = int(f.heldCutSide.Load()), int(f.heldCutProbed.Load())
	for _, k := range f.held {
		for _, n := range c.nodes {
			ok, err := c.check(n, "apikey:"+k, "chaos.held")
			// Right after a heal a peer connection may take a few seconds
			// to come back (see docs/operations.md): ask again.
			for tries := 0; err != nil && tries < 60; tries++ { // up to 15 s
				time.Sleep(250 * time.Millisecond) // retry pace
				ok, err = c.check(n, "apikey:"+k, "chaos.held")
			}
			if err != nil {
				t.Errorf("%s: checking %s through %s after recovery: %v", name, k, n.id, err)
			}
			if ok {
				f.r.heldAfter++
				t.Logf("%s: spent key %s (%s) admitted again after recovery, through %s at %s", name, k, f.kindOf(k), n.id, time.Now().UTC().Format("15:04:05.000"))
			}
		}
	}
	f.r.sdkNode, f.r.sdkFail, f.r.sdkErr = f.sdkNode.Load(), f.sdkFail.Load(), f.sdkErr.Load()
	for _, k := range f.hot {
		ev := f.events[k]
		if len(ev) < 2 {
			t.Errorf("%s: hot key %s got %d answers", name, k, len(ev))
			continue
		}
		admitted := 0
		for _, e := range ev {
			if e.allowed {
				admitted++
			}
		}
		ideal := hotBurst + hotRate*ev[len(ev)-1].at.Sub(ev[0].at).Seconds()
		f.r.admitted += float64(admitted)
		f.r.ideal += ideal
		f.r.over += math.Max(0, float64(admitted)-ideal)
	}
	return f.r
}

// majorityAllowance is what the majority may admit on the hot keys
// between cut and healed: per key, what refilled since the last check
// known to be denied before the cut (the bucket held less than one token
// then) plus the replication window (2). Counting from the denial rather
// than from the cut keeps a stalled client, whose bucket filled up
// before the cut, from failing the run; a key with no denial before the
// cut may have held its whole burst.
func (f *faultRun) majorityAllowance(cut, healed time.Time) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var allow float64
	for _, k := range f.hot {
		keyAllow := hotBurst + hotRate*healed.Sub(cut).Seconds() + 2
		for _, e := range slices.Backward(f.events[k]) {
			if !e.allowed && !e.cutSide && e.at.Before(cut) {
				keyAllow = 1 + hotRate*healed.Sub(e.sent).Seconds() + 2
				break
			}
		}
		allow += keyAllow
	}
	return allow
}

// hotDuring sums the admissions between from and to on the hot keys keep
// selects, by the cut side or the others.
func (f *faultRun) hotDuring(from, to time.Time, cutSide bool, keep func(k string) bool) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for k, ev := range f.events {
		if !keep(k) {
			continue
		}
		for _, e := range ev {
			if e.allowed && e.cutSide == cutSide && !e.at.Before(from) && e.at.Before(to) {
				n++
			}
		}
	}
	return float64(n)
}

func mustDocker(t *testing.T, args ...string) {
	t.Helper()
	if out, err := docker(args...); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

// The faults. Each leaves the cluster whole again (or fails the test).

func faultKill(t *testing.T, c *cluster) func(f *faultRun) {
	return func(f *faultRun) {
		n := f.target
		c.setUsable(c.others(n)...)
		f.beginFault()
		mustDocker(t, "kill", n.name)
		d, err := c.waitRing(c.others(n), c.others(n), 30*time.Second)
		if err != nil {
			t.Fatalf("kill: the survivors did not agree on a ring: %v", err)
		}
		f.r.detect = d
		time.Sleep(time.Until(f.faultStart.Add(5 * time.Second))) // down for 5 s
		mustDocker(t, "start", n.name)
		restarted := time.Now()
		if _, err := c.waitRing(c.nodes, c.nodes, time.Minute); err != nil {
			t.Fatalf("kill: no agreed ring after the restart: %v", err)
		}
		f.r.heal = time.Since(restarted)
		c.setUsable(c.nodes...)
		f.endFault()
	}
}

func faultPause(t *testing.T, c *cluster) func(f *faultRun) {
	return func(f *faultRun) {
		n := f.target
		c.setUsable(c.others(n)...)
		f.beginFault()
		mustDocker(t, "pause", n.name)
		d, err := c.waitRing(c.others(n), c.others(n), 10*time.Second)
		if err == nil {
			f.r.detect = d
		}
		time.Sleep(time.Until(f.faultStart.Add(10 * time.Second)))
		mustDocker(t, "unpause", n.name)
		resumed := time.Now()
		if _, err := c.waitRing(c.nodes, c.nodes, time.Minute); err != nil {
			t.Fatalf("pause: no agreed ring after the resume: %v", err)
		}
		f.r.heal = time.Since(resumed)
		c.setUsable(c.nodes...)
		f.endFault()
	}
}

// faultCut cuts the target off the cluster network for 10 s. Clients stay
// on both sides: the host keeps checking through the majority, and through
// the cut node over the control network (the hot keys at half the rate,
// the spent keys it holds a copy of once a second). Each side that holds a
// copy of a key's partition may admit on it only its refill over the cut
// plus the replication window; the cut side may admit a full limit on a
// key it holds no copy of (it starts from a full bucket).
func faultCut(t *testing.T, c *cluster) func(f *faultRun) {
	return func(f *faultRun) {
		n := f.target
		c.setUsable(c.others(n)...)
		f.beginFault()
		f.cutOff.Store(n)
		mustDocker(t, "network", "disconnect", c.net, n.name)
		cut := time.Now()
		f.r.cutDetect = -1
		detected := make(chan time.Duration, 1)
		go func() { // the cut side's own view, within the cut
			d, err := c.waitRing([]*cnode{n}, []*cnode{n}, 10*time.Second)
			if err != nil {
				d = -1
			}
			detected <- d
		}()
		d, err := c.waitRing(c.others(n), c.others(n), 10*time.Second)
		if err == nil {
			f.r.detect = d
		}
		time.Sleep(time.Until(f.faultStart.Add(10 * time.Second)))
		f.cutOff.Store(nil)
		f.r.cutDetect = <-detected
		mustDocker(t, "network", "connect", "--ip", n.ip, c.net, n.name)
		healed := time.Now()
		all := func(string) bool { return true }
		T := healed.Sub(cut).Seconds()
		f.r.cutAdmitted = f.hotDuring(cut, healed, false, all)
		f.r.cutAllow = f.majorityAllowance(cut, healed)
		copies := func(k string) bool { return f.hotCopy[k] }
		f.r.cutSideCopy = f.hotDuring(cut, healed, true, copies)
		f.r.cutAllowCopy = float64(len(f.hot)*2/3) * (hotRate*T + 2)
		f.r.cutSideNone = f.hotDuring(cut, healed, true, func(k string) bool { return !f.hotCopy[k] })
		f.r.cutAllowNone = float64(len(f.hot)-len(f.hot)*2/3) * (hotBurst + hotRate*T + 2)
		if _, err := c.waitRing(c.nodes, c.nodes, time.Minute); err != nil {
			t.Fatalf("cut: no agreed ring after the heal: %v", err)
		}
		f.r.heal = time.Since(healed)
		c.setUsable(c.nodes...)
		f.endFault()
	}
}

func faultRolling(t *testing.T, c *cluster) func(f *faultRun) {
	return func(f *faultRun) {
		f.beginFault()
		var stops []string
		for _, n := range c.nodes {
			c.setUsable(c.others(n)...)
			start := time.Now()
			mustDocker(t, "stop", "-t", "30", n.name)
			stopped := time.Since(start)
			leave := stopTimes(start, n)
			mustDocker(t, "start", n.name)
			d, err := c.waitRing(c.nodes, c.nodes, time.Minute)
			if err != nil {
				t.Fatalf("rolling: no agreed ring after restarting %s: %v", n.id, err)
			}
			f.r.heal = max(f.r.heal, d)
			stops = append(stops, fmt.Sprintf("%.1fs (%s)", stopped.Seconds(), leave))
			c.setUsable(c.nodes...)
		}
		f.r.note = "docker stop took " + strings.Join(stops, ", ")
		f.endFault()
	}
}

func faultFull(t *testing.T, c *cluster) func(f *faultRun) {
	return func(f *faultRun) {
		c.setUsable()
		f.beginFault()
		var names []string
		for _, n := range c.nodes {
			names = append(names, n.name)
		}
		mustDocker(t, append([]string{"stop", "-t", "30"}, names...)...)
		stopped := time.Since(f.faultStart)
		leaves := stopTimes(f.faultStart, c.nodes...)
		if os.Getenv("WEIR_CHAOS_DEBUG") != "" {
			for _, n := range c.nodes {
				logs, _ := docker("logs", "--since", f.faultStart.Add(-time.Second).UTC().Format(time.RFC3339Nano), n.name)
				t.Logf("--- %s's shutdown:\n%s", n.id, logs)
			}
		}
		mustDocker(t, append([]string{"start"}, names...)...)
		started := time.Now()
		if _, err := c.waitRing(c.nodes, c.nodes, time.Minute); err != nil {
			t.Fatalf("full stop: no agreed ring after the start: %v", err)
		}
		f.r.heal = time.Since(started)
		f.r.note = fmt.Sprintf("all three stopped (SIGTERM) in %.1fs: %s", stopped.Seconds(), leaves)
		c.setUsable(c.nodes...)
		f.endFault()
	}
}

// stopTimes reads how long each node's shutdown took (its "stopped
// after=" log line since since) and how its leave ended.
func stopTimes(since time.Time, ns ...*cnode) string {
	var out []string
	for _, n := range ns {
		logs, _ := docker("logs", "--since", since.Add(-time.Second).UTC().Format(time.RFC3339Nano), n.name)
		took, how := "?", "handed off"
		for _, line := range strings.Split(logs, "\n") {
			if _, after, ok := strings.Cut(line, "msg=stopped after="); ok {
				took = strings.Fields(after)[0]
			}
			if strings.Contains(line, "graceful leave incomplete") {
				how = "nobody left to hand to"
				if strings.Contains(line, "deadline") {
					how = "leave timeout"
				}
			}
		}
		out = append(out, fmt.Sprintf("%s %s, %s", n.id, took, how))
	}
	return strings.Join(out, "; ")
}

// TestChaos runs every fault against one cluster and prints the table of
// docs/operations.md, then asserts each row against its bound.
func TestChaos(t *testing.T) {
	image := requireDocker(t)
	strict := os.Getenv("WEIR_CHAOS_STRICT") != "0"
	run := runID()
	suiteStart := time.Now()
	c := newCluster(t, image, run)
	c.applyRules(chaosRules)

	cfg := client.DefaultConfig()
	for _, n := range c.nodes {
		cfg.Cluster = append(cfg.Cluster, n.ip+":9090")
	}
	cfg.GatewayID = run + "-gw"
	cfg.Logger = slog.New(slog.DiscardHandler)
	sdk, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	rctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err = sdk.WaitReady(rctx)
	cancel()
	if err != nil {
		t.Fatalf("SDK: %v", err)
	}

	leader := c.leader()
	if leader == nil {
		t.Fatal("no Raft leader")
	}
	follower := c.others(leader)[0]
	type fault struct {
		name   string
		target *cnode
		body   func(f *faultRun)
	}
	faults := []fault{
		{"kill", leader, faultKill(t, c)},
		{"pause", follower, faultPause(t, c)},
		{"cut", c.others(leader)[1], faultCut(t, c)},
		{"rolling", c.nodes[0], faultRolling(t, c)},
		{"full", c.nodes[0], faultFull(t, c)},
	}
	// WEIR_CHAOS_FAULTS picks faults, in its order, repeats included.
	order := faults
	if only := os.Getenv("WEIR_CHAOS_FAULTS"); only != "" {
		order = nil
		for _, name := range strings.Split(only, ",") {
			i := slices.IndexFunc(faults, func(f fault) bool { return f.name == name })
			if i < 0 {
				t.Fatalf("WEIR_CHAOS_FAULTS: no fault %q", name)
			}
			order = append(order, faults[i])
		}
	}
	var rows []row
	for i, fl := range order {
		r := measure(t, c, sdk, fl.name, fmt.Sprintf("%s%d", fl.name, i), fl.target, fl.body)
		switch fl.name {
		case "kill", "rolling":
			r.bound, r.boundText = 0.05*r.ideal, "5% (replication window)"
		case "pause", "cut":
			r.bound, r.boundText = r.ideal, "100% (a full limit per side)"
		case "full":
			// Hot keys refill within seconds: not durable, in memory only.
			// Spent keys (3 an hour) are durable and must stay spent.
			r.bound, r.boundText = float64(hotKeys*hotBurst), "one burst per key (hot keys are not durable)"
		}
		rows = append(rows, r)
	}
	table := formatTable(rows, time.Since(suiteStart))
	fmt.Println(table)
	t.Log("\n" + table)

	for _, r := range rows {
		if r.lost != 0 {
			t.Errorf("%s: %d of %d acknowledged rule writes lost", r.fault, r.lost, r.acked)
		}
		if r.acked == 0 {
			t.Errorf("%s: no rule write was acknowledged", r.fault)
		}
		if a := r.answered(); !(a >= 0.99) {
			t.Errorf("%s: %.1f%% of the SDK's checks answered during the fault, want >= 99%%", r.fault, 100*a)
		}
		strictRow := r.fault != "cut" || strict
		if r.over > r.bound {
			msg := fmt.Sprintf("%s: hot keys admitted %.0f over the ideal %.0f, bound %.0f (%s)", r.fault, r.over, r.ideal, r.bound, r.boundText)
			if strictRow {
				t.Error(msg)
			} else {
				t.Log("not strict (WEIR_CHAOS_STRICT=0): " + msg)
			}
		}
		if !r.countersByDesign && (r.heldDuring > 0 || r.heldAfter > 0 || r.heldCutSide > 0) {
			msg := fmt.Sprintf("%s: spent keys admitted again: %d during the fault, %d after recovery, %d on the cut side (of %d asked)",
				r.fault, r.heldDuring, r.heldAfter, r.heldCutSide, r.heldCutProbed)
			if strictRow {
				t.Error(msg)
			} else {
				t.Log("not strict (WEIR_CHAOS_STRICT=0): " + msg)
			}
		}
		if r.fault == "cut" {
			for _, side := range []struct {
				what          string
				admitted, max float64
			}{
				{"the majority, on the hot keys (it holds a copy of each)", r.cutAdmitted, r.cutAllow},
				{"the cut node, on the hot keys it holds a copy of", r.cutSideCopy, r.cutAllowCopy},
				{"the cut node, on the hot keys it holds no copy of", r.cutSideNone, r.cutAllowNone},
			} {
				if side.admitted > side.max {
					msg := fmt.Sprintf("cut: %s admitted %.0f while cut; at most %.0f allowed", side.what, side.admitted, side.max)
					if strictRow {
						t.Error(msg)
					} else {
						t.Log("not strict (WEIR_CHAOS_STRICT=0): " + msg)
					}
				}
			}
		}
		if r.fault == "cut" && r.heldCutProbed == 0 {
			t.Errorf("cut: the cut node answered no check on the spent keys it holds a copy of")
		}
	}
}

// formatTable renders the rows as the Markdown table of docs/operations.md.
func formatTable(rows []row, took time.Duration) string {
	var b strings.Builder
	b.WriteString("| fault | rule writes lost (acked) | hot keys over the ideal (bound) | checks answered during the fault (node + fail mode) | s to agreed ring: detect / heal | counters held after recovery |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	secs := func(d time.Duration) string {
		if d < 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f", d.Seconds())
	}
	for _, r := range rows {
		held := "yes"
		switch {
		case r.countersByDesign:
			held = fmt.Sprintf("no, by design: counters live in memory (%d of %d spent-key checks admitted)", r.heldAfter, heldKeys*3)
		case r.heldDuring+r.heldAfter+r.heldCutSide > 0:
			held = fmt.Sprintf("**no**: %d admitted during, %d after", r.heldDuring, r.heldAfter)
		case r.fault == "full":
			held = fmt.Sprintf("yes: durable counters restored from the data dirs (%d of %d spent-key checks admitted)", r.heldAfter, heldKeys*3)
		}
		if r.fault == "cut" {
			held += fmt.Sprintf("; cut side: %d of %d checks on spent keys it holds a copy of admitted", r.heldCutSide, r.heldCutProbed)
		}
		over := fmt.Sprintf("%.0f admitted, ideal %.0f: +%.0f over (%.1f%%; bound %.0f, %s)", r.admitted, r.ideal, r.over, 100*r.over/r.ideal, r.bound, r.boundText)
		if r.fault == "cut" {
			over += fmt.Sprintf("; while cut: majority %.0f (allowed %.0f), cut side on its copies %.0f (allowed %.0f), on keys it holds no copy of %.0f (allowed %.0f)",
				r.cutAdmitted, r.cutAllow, r.cutSideCopy, r.cutAllowCopy, r.cutSideNone, r.cutAllowNone)
		}
		all := r.sdkNode + r.sdkFail + r.sdkErr
		answered := fmt.Sprintf("%.1f%% (%.1f%% + %.1f%%) of %d", 100*r.answered(),
			100*float64(r.sdkNode)/float64(max(all, 1)), 100*float64(r.sdkFail)/float64(max(all, 1)), all)
		name := r.fault
		if r.note != "" {
			name += " (" + r.note + ")"
		}
		ring := secs(r.detect) + " / " + secs(r.heal)
		if r.fault == "cut" {
			cutSide := secs(r.cutDetect)
			if r.cutDetect < 0 {
				cutSide = "> 10" // not within the cut
			}
			ring = fmt.Sprintf("%s (cut side %s) / %s", secs(r.detect), cutSide, secs(r.heal))
		}
		fmt.Fprintf(&b, "| %s | %d (%d) | %s | %s | %s | %s |\n", name, r.lost, r.acked, over, answered, ring, held)
	}
	fmt.Fprintf(&b, "\nwhole suite: %.0f s", took.Seconds())
	return b.String()
}
