package region

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/region/share"
)

// The precision simulation: the pure allocator (share.Table) of three
// regions, each deciding a global token bucket from its share (Scale,
// bucket.Decide) under a demand schedule, on a fake millisecond clock with
// the regions' steps out of phase and a one-way latency on every exchange.
// It measures where a steady state's missing tokens go: share in flight
// (given, not yet taken), the idle region's share, and tokens a region's
// bucket could not hold (its callers paused, the bucket full).

type simEvent struct {
	at  int64 // ms
	seq int64
	run func()
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int)   { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)     { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any       { o := *q; e := o[len(o)-1]; *q = o[:len(o)-1]; return e }
func (q *simQueue) add(e simEvent) { heap.Push(q, e) }

// precisionRun is one simulated run's configuration.
type precisionRun struct {
	names    []string
	demand   []int64 // checks per ms asked in each region
	latency  int64   // ms one way between regions
	interval int64   // ms between steps
	phase    []int64 // ms: each region's first step
	duration int64   // ms
	settle   int64   // ms: the steady window starts here
	// stall: per ms, the chance a loaded region's callers pause, and the
	// pause length in ms (none when 0).
	stallP   float64
	stallLen int64
	joint    bool // the loaded regions' callers pause together (one load generator)
	noTake   bool // grants taken at steps only (as before Table.Take)
	seed     uint64
	limit    bucket.Limit
}

// precisionResult is what a run measured over the steady window, in
// tokens.
type precisionResult struct {
	ideal    float64   // rate × window
	admitted []int64   // per region
	entitled []float64 // ∫ share × rate: what the region's share let it admit
	inFlight float64   // ∫ (Whole − Σ held) × rate: share given and not yet taken
	moves    int64     // steps at which a region gave share
}

func (r precisionResult) total() int64 {
	var s int64
	for _, a := range r.admitted {
		s += a
	}
	return s
}

func (r precisionResult) deviation() float64 {
	return (float64(r.total()) - r.ideal) / r.ideal * 100
}

func runPrecision(t testing.TB, pr precisionRun) precisionResult {
	t.Helper()
	const key = "bench.global\x00apikey:k1"
	n := len(pr.names)
	ms := int64(time.Millisecond)
	base := int64(1_000_000_000_000)
	tabs := make([]*share.Table, n)
	for i, name := range pr.names {
		cfg := share.DefaultConfig(name, pr.names)
		cfg.Interval = time.Duration(pr.interval) * time.Millisecond
		tab, err := share.New(cfg, base)
		if err != nil {
			t.Fatal(err)
		}
		tabs[i] = tab
	}
	// Region index in the tables' sorted order.
	idx := make([]int, n)
	for i := range pr.names {
		for j, r := range tabs[0].Regions() {
			if r == pr.names[i] {
				idx[i] = j
			}
		}
	}
	states := make([]bucket.State, n)
	asked, spent := make([]int64, n), make([]int64, n)
	stalled := make([]int64, n)
	rng := rand.New(rand.NewPCG(pr.seed, pr.seed^0x9e3779b9))
	var q simQueue
	var seq int64
	add := func(at int64, f func()) { seq++; q.add(simEvent{at: at, seq: seq, run: f}) }
	res := precisionResult{admitted: make([]int64, n), entitled: make([]float64, n)}
	for i := range tabs {
		i := i
		var step func(at int64)
		step = func(at int64) {
			now := base + at*ms
			tab := tabs[i]
			tab.Observe(key, asked[i], spent[i])
			asked[i], spent[i] = 0, 0
			before := tab.Records(key)
			tab.Step(now)
			if gave(before, tab.Records(key), idx[i]) && at >= pr.settle {
				res.moves++
			}
			out := tab.Outbox()
			for j := range tabs {
				if j == i {
					continue
				}
				add(at+pr.latency, func() {
					peer := tabs[j]
					peer.Heard(idx[i], base+(at+pr.latency)*ms)
					for k, recs := range out {
						peer.Merge(idx[i], k, recs)
					}
					for k := range out {
						if !pr.noTake {
							peer.Take(k, base+(at+pr.latency)*ms)
						}
						peer.Rebalance(k, base+(at+pr.latency)*ms)
					}
					answer := map[string][]share.Record{}
					for k := range out {
						answer[k] = peer.Records(k)
					}
					add(at+2*pr.latency, func() {
						for k, recs := range answer {
							tab.Merge(idx[j], k, recs)
							if !pr.noTake {
								tab.Take(k, base+(at+2*pr.latency)*ms)
							}
						}
						tab.RoundTrip(idx[j], base+(at+2*pr.latency)*ms)
					})
				})
			}
			add(at+pr.interval, func() { step(at + pr.interval) })
		}
		add(pr.phase[i], func() { step(pr.phase[i]) })
	}
	ratePerMs := float64(pr.limit.Rate) / float64(pr.limit.Period/time.Millisecond)
	for at := int64(0); at < pr.duration; at++ {
		for q.Len() > 0 && q[0].at <= at {
			heap.Pop(&q).(simEvent).run()
		}
		now := base + at*ms
		var sum int64
		for i, tab := range tabs {
			sh := tab.Share(key)
			sum += sh
			if at >= pr.settle {
				res.entitled[i] += float64(sh) / float64(share.Whole) * ratePerMs
			}
			if pr.stallP > 0 && pr.demand[i] > 0 && stalled[i] <= at && (!pr.joint || i == 0) && rng.Float64() < pr.stallP {
				stalled[i] = at + pr.stallLen
				if pr.joint {
					for j := range stalled {
						stalled[j] = at + pr.stallLen
					}
				}
			}
			if stalled[i] > at {
				continue
			}
			l := Scale(pr.limit, sh, n)
			for range pr.demand[i] {
				var r bucket.Result
				states[i], r = bucket.Decide(states[i], l, 1, now)
				asked[i]++
				if r.Allowed {
					spent[i]++
					if at >= pr.settle {
						res.admitted[i]++
					}
				}
			}
		}
		if at >= pr.settle {
			res.inFlight += float64(share.Whole-sum) / float64(share.Whole) * ratePerMs
			res.ideal += ratePerMs
		}
	}
	return res
}

// gave reports whether the region's own record granted more after than
// before.
func gave(before, after []share.Record, self int) bool {
	var b, a int64
	for _, r := range before {
		if r.Origin == self {
			for _, g := range r.Granted {
				b += g
			}
		}
	}
	for _, r := range after {
		if r.Origin == self {
			for _, g := range r.Granted {
				a += g
			}
		}
	}
	return a > b
}

func defaultPrecisionRun() precisionRun {
	return precisionRun{
		names: []string{"ap", "eu", "us"}, demand: []int64{8, 4, 0}, latency: 1, interval: 250,
		phase: []int64{0, 83, 167}, duration: 13_000, settle: 3_000, seed: 1,
		limit: bucket.Limit{Algorithm: bucket.TokenBucket, Rate: 1000, Period: time.Second, Burst: 100},
	}
}

func logPrecision(t *testing.T, name string, r precisionResult) {
	t.Helper()
	var ent float64
	for _, e := range r.entitled {
		ent += e
	}
	t.Logf("%s: admitted %d of ideal %.0f (%+.2f%%); per region admitted %v entitled %.0f; in flight %.0f (%.2f%%); idle region's share %.0f (%.2f%%); moves %d",
		name, r.total(), r.ideal, r.deviation(), r.admitted, r.entitled, r.inFlight, r.inFlight/r.ideal*100,
		r.entitled[2], r.entitled[2]/r.ideal*100, r.moves)
}

// TestPrecisionWhereTokensGo runs the simulation with and without
// Table.Take (grants taken as records arrive) and logs where the steady
// window's tokens went. With Take it asserts: never more than the global
// limit (rate × window plus the burst the buckets held when the window
// began); steady callers lose nothing but the idle region's idle floor;
// with pauses up to 40 ms (shorter than a busy region's bucket holds) no
// more than 0.5%, and share in flight stays under 0.1% of the rate.
func TestPrecisionWhereTokensGo(t *testing.T) {
	for _, noTake := range []bool{true, false} {
		t.Run(fmt.Sprintf("noTake=%v", noTake), func(t *testing.T) { precisionTable(t, noTake) })
	}
}

func precisionTable(t *testing.T, noTake bool) {
	pr := defaultPrecisionRun()
	pr.noTake = noTake
	check := func(name string, r precisionResult, minDev float64) {
		t.Helper()
		logPrecision(t, name, r)
		if over := float64(r.total()) - r.ideal; over > float64(pr.limit.Burst) {
			t.Errorf("%s: admitted %d, %.0f over rate × window (more than the burst)", name, r.total(), over)
		}
		if !noTake && r.deviation() < minDev {
			t.Errorf("%s: %+.2f%%, want at least %+.2f%%", name, r.deviation(), minDev)
		}
		if !noTake && minDev > -1 && r.inFlight > r.ideal/1000 {
			t.Errorf("%s: %.0f tokens of share in flight (%.2f%%), want under 0.1%%", name, r.inFlight, r.inFlight/r.ideal*100)
		}
	}
	check("steady demand 8:4:0, 1 ms", runPrecision(t, pr), -0.2)
	pr.latency = 40
	check("steady demand 8:4:0, 40 ms", runPrecision(t, pr), -0.2)
	pr.latency = 1
	pr.stallP, pr.stallLen = 0.005, 80
	check("stalls 80 ms at 0.5%/ms", runPrecision(t, pr), -100)
	for _, sl := range []int64{20, 40, 60, 100} {
		for _, joint := range []bool{false, true} {
			pr.stallP, pr.stallLen, pr.joint = 0.1/float64(sl), sl, joint
			minDev := -100.0
			if sl <= 40 {
				minDev = -0.5
			}
			check(fmt.Sprintf("stalls %d ms, 10%% of the time, joint %v", sl, joint), runPrecision(t, pr), minDev)
		}
	}
}
