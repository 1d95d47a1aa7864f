package sim_test

import (
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirlimit/weir/sim"
)

// mix is make sim's CI mix: seeds per cluster size, 60 simulated seconds
// each (see docs/design.md, "Simulator bounds", for what it took).
var mix = []struct{ nodes, seeds int }{{3, 800}, {5, 600}, {8, 400}, {16, 200}}

func envInt(t *testing.T, name string) int {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a number >= 0", name, v)
	}
	return n
}

// job is one seed of a search.
type job struct {
	seed  uint64
	nodes int
}

type result struct {
	job
	out  sim.Outcome
	wall time.Duration
}

// each runs f(i) for every i in [0, n), on every core.
func each(n int, f func(int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// search runs jobs on every core, each seed on one goroutine of its own
// (a run is single-threaded), and returns the outcomes in job order.
func search(jobs []job, opts func(job) sim.Options) []result {
	out := make([]result, len(jobs))
	each(len(jobs), func(i int) {
		start := time.Now()
		o := sim.Run(opts(jobs[i]))
		out[i] = result{jobs[i], o, time.Since(start)}
	})
	return out
}

// TestSimSearch is make sim: WEIR_SIM_SEED=S replays one seed with its
// readable trace, WEIR_SIM_CASE=path a kept case (make sim CASE=path); WEIR_SIM_SEEDS=N (WEIR_SIM_NODES=n, default 3) searches
// N seeds from WEIR_SIM_FIRST (default 1); neither runs the CI mix.
// WEIR_SIM_SHRINK=1 shrinks the first failure's schedule; WEIR_SIM_RING
// runs another ring shape than production's (ringOverride); WEIR_SIM_STRICT=1
// judges the known limits as violations (Options.Strict). It runs only
// with WEIR_SIM=1 (go test ./sim runs TestSimSeeds instead).
func TestSimSearch(t *testing.T) {
	if os.Getenv("WEIR_SIM") == "" {
		t.Skip("make sim runs this (WEIR_SIM=1)")
	}
	nodes := envInt(t, "WEIR_SIM_NODES")
	if path := os.Getenv("WEIR_SIM_CASE"); path != "" {
		c := readCase(t, path)
		fmt.Printf("case %s: expect %s\n", c.Name, c.Expect)
		replay(t, c.Options())
		return
	}
	if seed := os.Getenv("WEIR_SIM_SEED"); seed != "" {
		s, err := strconv.ParseUint(seed, 10, 64)
		if err != nil {
			t.Fatalf("WEIR_SIM_SEED=%q: %v", seed, err)
		}
		replay(t, sim.DefaultOptions(s, max(nodes, 3)))
		return
	}
	var jobs []job
	first := uint64(max(envInt(t, "WEIR_SIM_FIRST"), 1))
	if n := envInt(t, "WEIR_SIM_SEEDS"); n > 0 {
		for i := range n {
			jobs = append(jobs, job{first + uint64(i), max(nodes, 3)})
		}
	} else {
		for _, m := range mix {
			for i := range m.seeds {
				jobs = append(jobs, job{first + uint64(i), m.nodes})
			}
		}
	}
	strict := os.Getenv("WEIR_SIM_STRICT") != ""
	opts := func(j job) sim.Options {
		o := sim.DefaultOptions(j.seed, j.nodes)
		o.Strict = strict
		aimed(&o)
		ringOverride(t, &o)
		return o
	}
	start := time.Now()
	res := search(jobs, opts)
	wall := time.Since(start)
	failed := 0
	walls := map[int][]time.Duration{}
	var firstFail *result
	for i, r := range res {
		walls[r.nodes] = append(walls[r.nodes], r.wall)
		if r.out.Failed() {
			failed++
			if firstFail == nil {
				firstFail = &res[i]
			}
			fmt.Printf("FAIL %s", r.out)
			fmt.Printf("  replay: make sim SEED=%d NODES=%d\n", r.seed, r.nodes)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(walls)) {
		ws := walls[n]
		slices.Sort(ws)
		fmt.Printf("%d nodes: %d seeds, p50 %s p99 %s per seed\n", n, len(ws), ws[len(ws)/2].Round(time.Millisecond), ws[len(ws)*99/100].Round(time.Millisecond))
	}
	fmt.Printf("wall %s on %d cores\n", wall.Round(time.Second), runtime.GOMAXPROCS(0))
	if firstFail != nil && os.Getenv("WEIR_SIM_SHRINK") != "" {
		faults, o := sim.Shrink(opts(firstFail.job), 200)
		c := sim.Case{Seed: firstFail.seed, Nodes: firstFail.nodes, Expect: o.Verdict(), Faults: faults, Strict: strict, Ring: opts(firstFail.job).Ring,
			Note: []string{fmt.Sprintf("# shrunk from seed %d (%d faults to %d)", firstFail.seed, len(firstFail.out.Faults), len(faults))}}
		fmt.Printf("shrunk (sim/testdata case):\n%s", c.Format())
	}
	fmt.Printf("%d passed, %d failed\n", len(res)-failed, failed)
	if failed > 0 {
		t.Fail()
	}
}

// aimed sets the aimed sequences of o: the two-rings sequence
// (sim.Options.TwoRings) unless WEIR_SIM_TWO_RINGS=0, and those the CI
// mix leaves out: WEIR_SIM_RECUT_JOIN=1 the recut-join one
// (sim.Options.RecutJoin), WEIR_SIM_JOIN_LEAVE=1 the join-leave one
// (sim.Options.JoinLeave), WEIR_SIM_RECUT_DELAY=1 the recut-delay one
// (sim.Options.RecutDelay), WEIR_SIM_RECUT_LOSS=1 the recut-loss one
// (sim.Options.RecutLoss, for 11 nodes or more), WEIR_SIM_FLAP_CUT=1 the
// flap-cut one (sim.Options.FlapCut).
func aimed(o *sim.Options) {
	o.TwoRings = os.Getenv("WEIR_SIM_TWO_RINGS") != "0"
	o.RecutJoin = os.Getenv("WEIR_SIM_RECUT_JOIN") != ""
	o.JoinLeave = os.Getenv("WEIR_SIM_JOIN_LEAVE") != ""
	o.RecutDelay = os.Getenv("WEIR_SIM_RECUT_DELAY") != ""
	o.RecutLoss = os.Getenv("WEIR_SIM_RECUT_LOSS") != ""
	o.FlapCut = os.Getenv("WEIR_SIM_FLAP_CUT") != ""
}

// ringOverride sets o's ring to WEIR_SIM_RING's shape when it is set
// ("PARTITIONS VNODES LAYOUT" or "legacy": sim.ParseRing); without it a
// run keeps the shape it has (production's, or a case's `ring` line).
func ringOverride(t *testing.T, o *sim.Options) {
	s := os.Getenv("WEIR_SIM_RING")
	if s == "" {
		return
	}
	r, err := sim.ParseRing(s, o.Nodes)
	if err != nil {
		t.Fatalf("WEIR_SIM_RING=%q: %v", s, err)
	}
	o.Ring = r
}

// replay runs one seed (or a case) with its readable trace.
func replay(t *testing.T, o sim.Options) {
	o.Verbose = true
	aimed(&o)
	ringOverride(t, &o)
	out := sim.Run(o)
	fmt.Printf("seed %d, %d nodes, ring %s; faults:\n", o.Seed, o.Nodes, sim.RingShape(o))
	for _, f := range out.Faults {
		fmt.Printf("  %s\n", f)
	}
	grep := os.Getenv("WEIR_SIM_GREP")
	for _, l := range out.Readable {
		if grep == "" || strings.Contains(l, grep) {
			fmt.Println(l)
		}
	}
	fmt.Print(out)
	fmt.Printf("trace %s\n", out.Trace)
	if out.Failed() {
		t.Fail()
	}
}

// TestSimSeedsToFind measures how many seeds a search takes to find a
// defect: with a bug switch on (WEIR_SIM_BUG=name, -tags weirbugs:
// make sim-find BUG=name), each of WEIR_SIM_STREAMS (default 20)
// independent seed streams runs seeds until one fails, at most
// WEIR_SIM_CAP (default 100); it prints each stream's count and the
// median (WEIR_SIM_RING: another ring shape, as for make sim). A seed
// that fails with every switch off too is no find: the stream goes on.
// WEIR_SIM_TWO_RINGS=0 leaves the two-rings sequence out;
// WEIR_SIM_RECUT_JOIN=1, WEIR_SIM_JOIN_LEAVE=1, WEIR_SIM_RECUT_DELAY=1,
// WEIR_SIM_RECUT_LOSS=1 and WEIR_SIM_FLAP_CUT=1 add theirs (aimed). It runs only with
// WEIR_SIM_FIND=1.
func TestSimSeedsToFind(t *testing.T) {
	if os.Getenv("WEIR_SIM_FIND") == "" {
		t.Skip("run with WEIR_SIM_FIND=1 and a bug switch (make sim-find BUG=name)")
	}
	streams, limit, nodes := envInt(t, "WEIR_SIM_STREAMS"), envInt(t, "WEIR_SIM_CAP"), envInt(t, "WEIR_SIM_NODES")
	if streams == 0 {
		streams = 20
	}
	if limit == 0 {
		limit = 100
	}
	nodes = max(nodes, 3)
	shape := sim.DefaultOptions(0, nodes)
	ringOverride(t, &shape)
	opts := func(s, i int) sim.Options {
		o := sim.DefaultOptions(uint64(s+1)*1_000_000+uint64(i), nodes)
		aimed(&o)
		o.Ring = shape.Ring
		return o
	}
	// Rounds: each open stream runs from its next seed with the switches
	// on until one fails; then each such seed runs again with every
	// switch off, and one that fails then too is no find (a defect of
	// its own, counted in noFind): its stream goes on from the next seed.
	found := make([]int, streams) // the first seed that failed with the switch only; limit+1: none within the cap
	verdicts := make([]string, streams)
	noFind := make([][]int, streams)
	from := make([]int, streams)
	for s := range streams {
		found[s], from[s] = limit+1, 1
	}
	for {
		var open []int
		for s := range streams {
			if found[s] > limit && from[s] <= limit {
				open = append(open, s)
			}
		}
		if len(open) == 0 {
			break
		}
		failed := make([]int, streams)
		each(len(open), func(j int) {
			s := open[j]
			for i := from[s]; i <= limit; i++ {
				if out := sim.Run(opts(s, i)); out.Failed() {
					failed[s], verdicts[s] = i, out.Verdict()
					return
				}
			}
			from[s] = limit + 1
		})
		restore := switchesOff()
		each(len(open), func(j int) {
			s := open[j]
			if i := failed[s]; i > 0 {
				if sim.Run(opts(s, i)).Failed() {
					noFind[s] = append(noFind[s], i)
					from[s], verdicts[s] = i+1, ""
				} else {
					found[s] = i
				}
			}
		})
		restore()
	}
	sorted := slices.Sorted(slices.Values(found))
	med := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		med = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	}
	fmt.Printf("bug %q, %d nodes: seeds to find per stream %v (%d = not within %d)\n", os.Getenv("WEIR_SIM_BUG"), nodes, found, limit+1, limit)
	fmt.Printf("invariants: %v\n", verdicts)
	fmt.Printf("seeds that failed with every switch off too (not finds): %v\n", noFind)
	if med > limit {
		fmt.Printf("median: not found within the cap of %d\n", limit)
	} else {
		fmt.Printf("median seeds to find: %d\n", med)
	}
}
