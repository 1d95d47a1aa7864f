package bench

import (
	"context"
	"testing"
	"time"
)

// stallTarget answers at once, except that every check sent while a stall
// is on waits for its end (a target pausing, e.g. for GC or a failover).
type stallTarget struct {
	start      time.Time
	from, till time.Duration
}

func (s *stallTarget) Check(ctx context.Context, _, _ string, _ int64) (bool, error) {
	at := time.Since(s.start)
	if at >= s.from && at < s.till {
		select {
		case <-time.After(s.till - at):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return true, nil
}

func (s *stallTarget) Close() error { return nil }

// TestOpenLoopCountsFromTheSchedule: at a fixed arrival rate, checks are
// sent on schedule (never faster), and a 300 ms stall of the target is
// charged to every check scheduled during it, as a caller arriving then
// would see: most of the checks scheduled in those 300 ms wait ≥ 100 ms,
// so p90 is at least that. A closed loop sends one check per caller into
// the stall and so reports it in at most Callers checks.
func TestOpenLoopCountsFromTheSchedule(t *testing.T) {
	sc := Scenario{Name: "steady", Rules: []RuleSpec{{ID: "r", Rate: 10, Period: time.Second, Burst: 10}}, Keys: 10, Cost: 1}
	const rate, callers = 400.0, 4
	target := &stallTarget{}
	cfg := Config{Target: "stall", Callers: callers, Gateways: 1, Duration: 1200 * time.Millisecond, Seed: 1, Rate: rate}
	target.from, target.till = 400*time.Millisecond, 700*time.Millisecond
	r, err := Run(context.Background(), cfg, sc, func(int) (Target, error) {
		target.start = time.Now() // the run starts right after the gateways are made (and warmed up)
		return target, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Rate != rate {
		t.Errorf("result rate %g, want %g", r.Rate, rate)
	}
	// Never ahead of the schedule: at most one slot per caller beyond
	// rate × elapsed.
	if max := rate*r.Elapsed + callers; float64(r.Checks) > max {
		t.Errorf("%d checks in %.2fs at %g/s: ahead of the schedule (at most %.0f)", r.Checks, r.Elapsed, rate, max)
	}
	if r.Checks < 200 {
		t.Fatalf("only %d checks", r.Checks)
	}
	if r.P90us < 100_000 {
		t.Errorf("p90 %.0f µs: the stall's waiting checks were not counted from their scheduled time", r.P90us)
	}
	t.Logf("%d checks, p50 %.0f µs, p90 %.0f µs, p99 %.0f µs", r.Checks, r.P50us, r.P90us, r.P99us)
}

type instantTarget struct{}

func (instantTarget) Check(context.Context, string, string, int64) (bool, error) { return true, nil }
func (instantTarget) Close() error                                               { return nil }

// TestOpenLoopClockStartsAfterSetUp: the run's keys are built before its
// clock starts. When the clock started first, an open loop's first checks
// were scheduled before the callers could send them, and the time spent
// building a million keys was charged to them as latency (at 4,000/s and
// 100,000 keys about 35 ms on ~150 checks: enough to set p99 on its own).
// Compared with the time the same set-up takes in this process, so a
// slower machine slows both.
func TestOpenLoopClockStartsAfterSetUp(t *testing.T) {
	const keys = 1_000_000
	sc := Scenario{Name: "steady", Rules: []RuleSpec{{ID: "r", Rate: 10, Period: time.Second, Burst: 10}}, Keys: keys, Cost: 1}
	cfg := Config{Target: "instant", Callers: 8, Gateways: 1, Duration: 200 * time.Millisecond, Seed: 1, Rate: 2000}
	t0 := time.Now()
	_ = newRunState(cfg, sc)
	setUp := time.Since(t0)
	r, err := Run(context.Background(), cfg, sc, func(int) (Target, error) { return instantTarget{}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxUs*float64(time.Microsecond) >= float64(setUp)/2 {
		t.Errorf("slowest check %.0f µs with building the keys taking %v: the set-up counted as latency", r.MaxUs, setUp)
	}
	t.Logf("set-up %v; %d checks, p99 %.0f µs, max %.0f µs", setUp, r.Checks, r.P99us, r.MaxUs)
}
