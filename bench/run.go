package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirlimit/weir/limit"
)

// Config bounds one run.
type Config struct {
	Target   string // label for the report: "weir", "redis"
	Callers  int    // W concurrent callers
	Gateways int    // G simulated gateways; caller w uses gateway w % G
	// Duration and Count bound the run; whichever ends it first. At least
	// one must be set.
	Duration time.Duration
	Count    int64
	// Timeout bounds one check (default 5s).
	Timeout time.Duration
	// KeyPrefix makes this run's keys distinct from earlier runs'.
	KeyPrefix string
	Seed      uint64
	// Leases: the target spends rule leases locally (the SDK), so the
	// accuracy report states the lease bound.
	Leases bool
	// Midway, if set, is called once half-way through a duration-bounded
	// run (the failover and resize events).
	// Rate, when > 0, makes the run open-loop: checks are scheduled at a
	// fixed arrival rate (Rate per second in all, each caller taking every
	// Callers-th slot) instead of each caller sending its next check when
	// the last one is answered. A check's latency counts from its
	// scheduled time, so a target that stalls is charged for every check
	// that should have been sent meanwhile (no coordinated omission); the
	// callers bound the checks in flight, as a gateway's connections do.
	Rate   float64
	Midway func(ctx context.Context) error
	// Settle, when > 0 with a Duration, makes accuracy also report the
	// steady state: the checks sent in [Epoch+Settle, Epoch+Duration)
	// against rate × that window (no burst: by then demand has drained
	// it). Epoch is the run's start unless set (runs that are measured
	// together, as the regions', share one).
	Settle time.Duration
	Epoch  time.Time
	// Procs are the processes besides this one whose CPU the result
	// reports per check (Result.CPU), by role.
	Procs Procs
	// Forwards, when set, reads the nodes' forwarding so far: the result
	// then reports forward messages per check (Result.ForwardMsgs).
	Forwards func(ctx context.Context) (Forwards, error)
}

// Result is the outcome of one run. It marshals to the JSON line.
type Result struct {
	Target   string  `json:"target"`
	Scenario string  `json:"scenario"`
	Callers  int     `json:"callers"`
	Gateways int     `json:"gateways"`
	Keys     int     `json:"keys"`
	Dist     string  `json:"dist"`
	Rules    int     `json:"rules_per_check"`
	Elapsed  float64 `json:"elapsed_s"`
	Checks   int64   `json:"checks"`
	Allowed  int64   `json:"allowed"`
	Errors   int64   `json:"errors"`
	PerSec   float64 `json:"checks_per_s"`
	// Latencies in microseconds, as a caller sees them.
	P50us   float64 `json:"p50_us"`
	P90us   float64 `json:"p90_us"`
	P99us   float64 `json:"p99_us"`
	P999us  float64 `json:"p999_us"`
	MaxUs   float64 `json:"max_us"`
	FirstEr string  `json:"first_error,omitempty"`
	// Rate is the open loop's scheduled arrival rate (0: closed loop).
	Rate float64 `json:"open_loop_rate,omitempty"`
	// ItemsPerRPC is the mean checks per request (stream message or RPC) of a coalescing target during
	// the measured run (0: not reported).
	ItemsPerRPC float64 `json:"items_per_rpc,omitempty"`
	// ForwardMsgs is the forward messages the nodes wrote to owners per
	// answered check, and ItemsPerForward the items such a message
	// carried on average (0: not measured, or nothing forwarded).
	ForwardMsgs     float64 `json:"forward_msgs_per_check,omitempty"`
	ItemsPerForward float64 `json:"items_per_forward,omitempty"`
	// LeaseHits and BlockedHits are the checks the SDK served from a
	// lease or its blocked-until cache during the run, AutoLeases the
	// automatic leases owners granted it (0: none, or not the SDK).
	LeaseHits   uint64 `json:"lease_hits,omitempty"`
	BlockedHits uint64 `json:"blocked_hits,omitempty"`
	AutoLeases  uint64 `json:"auto_leases,omitempty"`
	// CPU is the CPU each role's processes used per answered check over
	// the measured run (Config.Procs; nil if a process could not be
	// read), and CPUAvail what the machine's cores gave a check at the
	// run's rate (runtime.NumCPU × elapsed / checks): their difference is
	// idle time or other work on the machine.
	CPU      []CPUShare `json:"cpu_per_check,omitempty"`
	CPUAvail float64    `json:"cpu_avail_us_per_check,omitempty"`
	// Idle is each server process's background while idle before the run
	// (IdleRole's processes; nil: not sampled).
	Idle     []Idle `json:"idle,omitempty"`
	IdleRole string `json:"idle_role,omitempty"`
	// RatePct, when > 0, says Rate is that percentage of Capacity, the
	// checks/s a closed-loop run of the same target reached just before.
	RatePct  float64 `json:"rate_pct_of_capacity,omitempty"`
	Capacity float64 `json:"capacity_checks_per_s,omitempty"`
	// RateFrom names the target whose open-loop rate this run used (a
	// floor run at its path's rate).
	RateFrom string `json:"rate_from,omitempty"`
	// Split is the latency of the checks a LocalChecker target decided
	// at the gateway apart from the others (nil: the target does not say).
	Split *SplitLatency `json:"split,omitempty"`

	Accuracy *AccuracyResult `json:"accuracy,omitempty"`
	Event    string          `json:"event,omitempty"`
}

// SplitLatency is the latency of the checks decided at the gateway
// (leases, the blocked-until cache) and of those that asked the cluster.
type SplitLatency struct {
	Local       int64   `json:"local_checks"`
	LocalP50us  float64 `json:"local_p50_us"`
	LocalP99us  float64 `json:"local_p99_us"`
	RemoteP50us float64 `json:"remote_p50_us"`
	RemoteP99us float64 `json:"remote_p99_us"`
}

// AllowedShare is Allowed/Checks (0 when nothing ran).
func (r *Result) AllowedShare() float64 {
	if r.Checks == 0 {
		return 0
	}
	return float64(r.Allowed) / float64(r.Checks)
}

// AccuracyResult is accuracy mode's verdict.
type AccuracyResult struct {
	Ideal float64 `json:"ideal_per_key"`
	// Admitted per key, and its deviation from Ideal in percent.
	Admitted  []int64   `json:"admitted"`
	Deviation []float64 `json:"deviation_pct"`
	// WorstDeviation is the deviation of largest magnitude.
	WorstDeviation float64 `json:"worst_deviation_pct"`
	// Fairness is the worst per-key max deviation of a gateway's admitted
	// count from the equal share, in percent.
	Fairness float64 `json:"fairness_pct"`
	// Lease and LeaseBound (lease × gateways, in tokens) are set for a
	// rule with a lease: the stated bound on |admitted − ideal| per key.
	Lease      int64 `json:"lease,omitempty"`
	LeaseBound int64 `json:"lease_bound,omitempty"`
	// WorstExcess is admitted − ideal of largest magnitude, in checks.
	WorstExcess float64 `json:"worst_excess"`
	// Steady is the same verdict over the steady window only (Config.Settle).
	Steady *SteadyResult `json:"steady,omitempty"`
}

// SteadyResult is accuracy over the steady window: the checks sent in
// [From, To) seconds after the epoch, against rate × (To − From).
type SteadyResult struct {
	From      float64   `json:"from_s"`
	To        float64   `json:"to_s"`
	Ideal     float64   `json:"ideal_per_key"`
	Admitted  []int64   `json:"admitted"`
	Deviation []float64 `json:"deviation_pct"`
	// Worst is the deviation of largest magnitude.
	Worst float64 `json:"worst_deviation_pct"`
	// Slots counts the window's 100 ms slots admitted in (all keys
	// together); Thin the slots that admitted less than half of rate ×
	// 100 ms per key: time in which the checks stalled (a loaded machine)
	// or the shares did not reach the callers.
	Slots []int64 `json:"-"`
	Thin  int     `json:"thin_slots"` // -1: not counted (one region's part)
	// OutsideThin is the deviation of the other slots together (all
	// keys) from rate × their time: the limiter's precision while the
	// checks flowed (set with Thin).
	OutsideThin float64 `json:"outside_thin_deviation_pct"`
}

// SteadySlot is the width of a steady window's slots.
const SteadySlot = 100 * time.Millisecond

// SteadyFill sets Deviation and Worst from Admitted and Ideal.
func (s *SteadyResult) SteadyFill() error {
	s.Deviation = make([]float64, len(s.Admitted))
	s.Worst = 0
	for k, adm := range s.Admitted {
		d, err := Deviation(adm, s.Ideal)
		if err != nil {
			return err
		}
		s.Deviation[k] = d
		if abs(d) > abs(s.Worst) {
			s.Worst = d
		}
	}
	return nil
}

// CountThin sets Thin from Slots (for a result that holds all of the
// limit's admissions: not one region's part).
func (s *SteadyResult) CountThin() {
	s.Thin = 0
	perSlot := s.Ideal / (s.To - s.From) * SteadySlot.Seconds() * float64(len(s.Admitted))
	var rest int64
	for _, v := range s.Slots {
		if float64(v) < perSlot/2 {
			s.Thin++
		} else {
			rest += v
		}
	}
	if n := len(s.Slots) - s.Thin; n > 0 {
		s.OutsideThin = (float64(rest)/(perSlot*float64(n)) - 1) * 100
	}
}

// caller is what one caller goroutine collects.
type caller struct {
	lat      []time.Duration
	local    []bool // per check in lat: decided at the gateway (a LocalChecker target)
	checks   int64
	allowed  int64
	errors   int64
	firstErr error
	perKey   []int64       // accuracy only
	steady   []int64       // accuracy with Settle: admitted in the steady window
	slots    []int64       // the same per SteadySlot of the window, all keys
	lastSent time.Duration // when (since the start) this caller sent its last check
}

// Run drives the targets made by newTarget with cfg's callers for sc and
// returns the result. Errors of single checks are counted, not returned.
func Run(ctx context.Context, cfg Config, sc Scenario, newTarget Factory) (*Result, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	if cfg.Callers < 1 || cfg.Gateways < 1 || (cfg.Duration <= 0 && cfg.Count <= 0) {
		return nil, fmt.Errorf("%w: need callers, gateways ≥ 1 and a duration or a count", ErrInput)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	targets, err := openTargets(cfg.Gateways, newTarget)
	defer closeTargets(targets)
	if err != nil {
		return nil, err
	}
	rules := sc.RuleIDs()
	if len(rules) > 1 {
		for _, t := range targets {
			if _, ok := t.(GroupChecker); !ok {
				return nil, ErrNoGroup
			}
		}
	}
	if err := warmUp(ctx, cfg, targets, rules); err != nil {
		return nil, err
	}
	return measure(ctx, cfg, sc, targets)
}

// openTargets makes n gateways' targets; on an error, those made so far
// are in the slice for closeTargets.
func openTargets(n int, newTarget Factory) ([]Target, error) {
	targets := make([]Target, 0, n)
	for g := range n {
		t, err := newTarget(g)
		if err != nil {
			return targets, fmt.Errorf("bench: gateway %d: %w", g, err)
		}
		targets = append(targets, t)
	}
	return targets, nil
}

func closeTargets(targets []Target) {
	for _, t := range targets {
		_ = t.Close()
	}
}

// warmUp has every caller make one check on a warm-up key that no
// measured check uses, so connections are open before the clock starts
// (accuracy measures the refill over the run's elapsed time). Cost 1: the
// SDK refuses cost 0.
func warmUp(ctx context.Context, cfg Config, targets []Target, rules []string) error {
	var warm sync.WaitGroup
	warmErr := make([]error, cfg.Callers)
	for w := range warmErr {
		warm.Add(1)
		go func() {
			defer warm.Done()
			wctx, wcancel := context.WithTimeout(ctx, cfg.Timeout)
			defer wcancel()
			key := "apikey:" + cfg.KeyPrefix + "warmup"
			t := targets[w%cfg.Gateways]
			if gc, ok := t.(GroupChecker); ok && len(rules) > 1 {
				_, warmErr[w] = gc.CheckGroup(wctx, key, rules, 1)
			} else {
				_, warmErr[w] = t.Check(wctx, key, rules[0], 1)
			}
		}()
	}
	warm.Wait()
	if err := errors.Join(warmErr...); err != nil {
		return fmt.Errorf("bench: warm-up: %w", err)
	}
	return nil
}

// runState is what every caller of one measured run shares (read-only but
// for budget).
type runState struct {
	cfg    Config
	sc     Scenario
	keys   []string
	rules  []string
	start  time.Time
	budget atomic.Int64 // checks left of cfg.Count
	// The steady window [steadyFrom, steadyTo), when measured.
	steadyFrom, steadyTo time.Time
	measureSteady        bool
}

func newRunState(cfg Config, sc Scenario) *runState {
	s := &runState{cfg: cfg, sc: sc, keys: make([]string, sc.Keys), rules: sc.RuleIDs()}
	for i := range s.keys {
		s.keys[i] = "apikey:" + cfg.KeyPrefix + strconv.Itoa(i)
	}
	s.budget.Store(cfg.Count)
	s.measureSteady = sc.Accuracy && cfg.Settle > 0 && cfg.Duration > cfg.Settle
	return s
}

// begin starts the run's clock: the callers' schedules and the steady
// window count from start.
func (s *runState) begin(start time.Time) {
	s.start = start
	epoch := s.epoch()
	s.steadyFrom, s.steadyTo = epoch.Add(s.cfg.Settle), epoch.Add(s.cfg.Duration)
}

// epoch is when the run's time counts from (Config.Epoch).
func (s *runState) epoch() time.Time {
	if s.cfg.Epoch.IsZero() {
		return s.start
	}
	return s.cfg.Epoch
}

// newCaller is caller w's empty record.
func (s *runState) newCaller() *caller {
	c := &caller{lat: make([]time.Duration, 0, 4096)}
	if s.sc.Accuracy {
		c.perKey = make([]int64, s.sc.Keys)
	}
	if s.measureSteady {
		c.steady = make([]int64, s.sc.Keys)
		c.slots = make([]int64, (s.cfg.Duration-s.cfg.Settle+SteadySlot-1)/SteadySlot)
	}
	return c
}

// measure runs the callers against the warmed-up targets and sums up.
func measure(ctx context.Context, cfg Config, sc Scenario, targets []Target) (*Result, error) {
	// What the callers need is made before the clock starts: building the
	// keys takes tens of milliseconds, which an open loop's first checks
	// would otherwise count as their latency.
	s := newRunState(cfg, sc)
	callers := make([]*caller, cfg.Callers)
	gens := make([]KeyGen, cfg.Callers)
	for w := range callers {
		callers[w] = s.newCaller()
		gen, err := NewKeyGen(sc.Keys, sc.Zipf, cfg.Seed+uint64(w)+1)
		if err != nil {
			return nil, err
		}
		gens[w] = gen
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Duration > 0 {
		var c2 context.CancelFunc
		runCtx, c2 = context.WithTimeout(runCtx, cfg.Duration)
		defer c2()
	}
	rpcs0, items0 := batching(targets)
	lease0, blocked0, auto0 := local(targets)
	meter := newCPUMeter(cfg.Procs, targets)
	fwd0, fwdErr := readForwards(ctx, cfg)
	cpu0 := meter.sample()
	s.begin(time.Now())
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			s.drive(ctx, runCtx, callers[w], targets[w%cfg.Gateways], gens[w], newSchedule(cfg, w, s.start))
		})
	}
	var midErr error
	if cfg.Midway != nil && cfg.Duration > 0 {
		select {
		case <-time.After(cfg.Duration / 2):
			midErr = cfg.Midway(ctx)
		case <-runCtx.Done():
		}
	}
	wg.Wait()
	elapsed := time.Since(s.start)
	cpu1 := meter.sample()
	fwd1, err := readForwards(ctx, cfg)
	fwdErr = errors.Join(fwdErr, err)
	if midErr != nil {
		return nil, fmt.Errorf("bench: mid-run event: %w", midErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := summarize(cfg, sc, callers, elapsed)
	if err != nil {
		return nil, err
	}
	if s.measureSteady && r.Accuracy != nil {
		if r.Accuracy.Steady, err = s.steadyResult(callers); err != nil {
			return nil, err
		}
	}
	if rpcs, items := batching(targets); rpcs > rpcs0 {
		r.ItemsPerRPC = float64(items-items0) / float64(rpcs-rpcs0)
	}
	if cfg.Forwards != nil && fwdErr == nil && r.Checks > 0 && fwd1.Msgs > fwd0.Msgs {
		r.ForwardMsgs = (fwd1.Msgs - fwd0.Msgs) / float64(r.Checks)
		r.ItemsPerForward = (fwd1.Items - fwd0.Items) / (fwd1.Msgs - fwd0.Msgs)
	}
	lease, blocked, auto := local(targets)
	r.LeaseHits, r.BlockedHits, r.AutoLeases = lease-lease0, blocked-blocked0, auto-auto0
	if r.CPU = meter.perCheck(cpu0, cpu1, r.Checks); r.CPU != nil {
		r.CPUAvail = float64(runtime.NumCPU()) * float64(elapsed/time.Microsecond) / float64(r.Checks)
	}
	return r, nil
}

// readForwards reads cfg.Forwards (zero when unset).
func readForwards(ctx context.Context, cfg Config) (Forwards, error) {
	if cfg.Forwards == nil {
		return Forwards{}, nil
	}
	return cfg.Forwards(ctx)
}

// drive is one caller's loop: check, record, until runCtx ends or the
// count is spent. ctx bounds each check (a check started before the end
// runs to its answer and is counted: the server decided it).
func (s *runState) drive(ctx, runCtx context.Context, c *caller, t Target, gen KeyGen, sched *schedule) {
	lc, _ := t.(LocalChecker)
	for runCtx.Err() == nil {
		if s.cfg.Count > 0 && s.budget.Add(-1) < 0 {
			return
		}
		k := gen.Next() // before the clock starts: not the target's time
		t0, ok := sched.next(runCtx)
		if !ok {
			return
		}
		cctx, ccancel := context.WithTimeout(ctx, s.cfg.Timeout)
		sent := time.Now()
		c.lastSent = sent.Sub(s.start)
		ok, local, err := s.check(cctx, t, lc, s.keys[k])
		d := time.Since(t0)
		ccancel()
		if ctx.Err() != nil {
			return // the caller gave up on the whole run
		}
		c.checks++
		c.lat = append(c.lat, d)
		if lc != nil {
			c.local = append(c.local, local)
		}
		switch {
		case err != nil:
			c.errors++
			if c.firstErr == nil {
				c.firstErr = err
			}
		case ok:
			s.admitted(c, k, sent)
		}
	}
}

// check asks t once about key: through lc when the target tells local
// decisions apart, as a group when the scenario checks several rules.
func (s *runState) check(ctx context.Context, t Target, lc LocalChecker, key string) (ok, local bool, err error) {
	switch {
	case lc != nil && len(s.rules) == 1:
		return lc.CheckLocal(ctx, key, s.rules[0], s.sc.Cost)
	case len(s.rules) == 1:
		ok, err = t.Check(ctx, key, s.rules[0], s.sc.Cost)
	default:
		ok, err = t.(GroupChecker).CheckGroup(ctx, key, s.rules, s.sc.Cost)
	}
	return ok, false, err
}

// admitted counts an allowed check of key k sent at sent.
func (s *runState) admitted(c *caller, k int, sent time.Time) {
	c.allowed++
	if c.perKey != nil {
		c.perKey[k]++
	}
	if c.steady != nil && !sent.Before(s.steadyFrom) && sent.Before(s.steadyTo) {
		c.steady[k]++
		c.slots[sent.Sub(s.steadyFrom)/SteadySlot]++
	}
}

// steadyResult is accuracy over the steady window.
func (s *runState) steadyResult(callers []*caller) (*SteadyResult, error) {
	rule, epoch := s.sc.Rules[0], s.epoch()
	st := &SteadyResult{From: s.steadyFrom.Sub(epoch).Seconds(), To: s.steadyTo.Sub(epoch).Seconds(), Admitted: make([]int64, s.sc.Keys)}
	var err error
	st.Ideal, err = Ideal(0, rule.Rate, rule.Period, s.steadyTo.Sub(s.steadyFrom))
	if err != nil {
		return nil, err
	}
	if s.sc.Cost > 1 {
		st.Ideal /= float64(s.sc.Cost)
	}
	st.Slots = make([]int64, (s.steadyTo.Sub(s.steadyFrom)+SteadySlot-1)/SteadySlot)
	for _, c := range callers {
		for k, v := range c.steady {
			st.Admitted[k] += v
		}
		for i, v := range c.slots {
			st.Slots[i] += v
		}
	}
	if err := st.SteadyFill(); err != nil {
		return nil, err
	}
	if s.cfg.Epoch.IsZero() {
		st.CountThin()
	} else {
		st.Thin = -1 // a part of runs measured together: their sum says
	}
	return st, nil
}

// local sums what the targets decided without the cluster.
func local(targets []Target) (leaseHits, blockedHits, autoLeases uint64) {
	for _, t := range targets {
		if l, ok := t.(LocalDecider); ok {
			a, b, c := l.Local()
			leaseHits, blockedHits, autoLeases = leaseHits+a, blockedHits+b, autoLeases+c
		}
	}
	return leaseHits, blockedHits, autoLeases
}

// batching sums the RPCs and items of the targets that coalesce.
func batching(targets []Target) (rpcs, items uint64) {
	for _, t := range targets {
		if b, ok := t.(Batcher); ok {
			r, i := b.Batching()
			rpcs, items = rpcs+r, items+i
		}
	}
	return rpcs, items
}

func summarize(cfg Config, sc Scenario, callers []*caller, elapsed time.Duration) (*Result, error) {
	r := &Result{
		Target: cfg.Target, Scenario: sc.Name, Callers: cfg.Callers, Gateways: cfg.Gateways,
		Keys: sc.Keys, Dist: "uniform", Rules: len(sc.Rules), Elapsed: elapsed.Seconds(), Event: string(sc.Event),
		Rate: cfg.Rate,
	}
	if sc.Zipf {
		r.Dist = fmt.Sprintf("zipf(s=%.1f)", ZipfS)
	}
	var n int
	for _, c := range callers {
		n += len(c.lat)
	}
	all := make([]time.Duration, 0, n)
	for _, c := range callers {
		all = append(all, c.lat...)
		r.Checks += c.checks
		r.Allowed += c.allowed
		r.Errors += c.errors
		if r.FirstEr == "" && c.firstErr != nil {
			r.FirstEr = c.firstErr.Error()
		}
	}
	r.PerSec = float64(r.Checks) / elapsed.Seconds()
	l := Summarize(all)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	r.P50us, r.P90us, r.P99us, r.P999us, r.MaxUs = us(l.P50), us(l.P90), us(l.P99), us(l.P999), us(l.Max)
	if slices.ContainsFunc(callers, func(c *caller) bool { return c.local != nil }) {
		var local, remote []time.Duration
		for _, c := range callers {
			for i, d := range c.lat {
				if c.local[i] {
					local = append(local, d)
				} else {
					remote = append(remote, d)
				}
			}
		}
		sl, sr := Summarize(local), Summarize(remote)
		r.Split = &SplitLatency{Local: int64(len(local)), LocalP50us: us(sl.P50), LocalP99us: us(sl.P99), RemoteP50us: us(sr.P50), RemoteP99us: us(sr.P99)}
	}
	if sc.Accuracy {
		acc, err := accuracy(cfg, sc, callers, elapsed)
		if err != nil {
			return nil, err
		}
		r.Accuracy = acc
	}
	return r, nil
}

func accuracy(cfg Config, sc Scenario, callers []*caller, elapsed time.Duration) (*AccuracyResult, error) {
	rule := sc.Rules[0]
	// The refill counts while checks are being sent, not during the tail in
	// which the last answers arrive (a slow tail would inflate the ideal).
	var window time.Duration
	for _, c := range callers {
		window = max(window, c.lastSent)
	}
	if window == 0 {
		window = elapsed
	}
	ideal, err := Ideal(rule.Burst, rule.Rate, rule.Period, window)
	if err != nil {
		return nil, err
	}
	if sc.Cost > 1 {
		ideal /= float64(sc.Cost)
	}
	a := &AccuracyResult{Ideal: ideal, Admitted: make([]int64, sc.Keys), Deviation: make([]float64, sc.Keys)}
	switch {
	case cfg.Leases && rule.Lease > 0:
		a.Lease, a.LeaseBound = rule.Lease, rule.Lease*int64(cfg.Gateways)
	case cfg.Leases && rule.AutoLease:
		// An automatic lease is at most AutoLeaseSize(burst, 2) per gateway.
		n := limit.AutoLeaseSize(rule.Burst, 2)
		a.Lease, a.LeaseBound = n, n*int64(cfg.Gateways)
	}
	perGW := make([][]int64, sc.Keys)
	for k := range perGW {
		perGW[k] = make([]int64, cfg.Gateways)
	}
	for w, c := range callers {
		for k, v := range c.perKey {
			a.Admitted[k] += v
			perGW[k][w%cfg.Gateways] += v
		}
	}
	for k, adm := range a.Admitted {
		d, err := Deviation(adm, ideal)
		if err != nil {
			return nil, err
		}
		a.Deviation[k] = d
		if abs(d) > abs(a.WorstDeviation) {
			a.WorstDeviation = d
		}
		if x := float64(adm) - ideal; abs(x) > abs(a.WorstExcess) {
			a.WorstExcess = x
		}
		if f, err := Fairness(perGW[k]); err == nil && f > a.Fairness {
			a.Fairness = f
		}
	}
	return a, nil
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// schedule gives one caller the times its checks count from: now, in a
// closed loop; its next slot of the open loop's fixed arrival rate,
// waiting for it if it is still ahead.
type schedule struct {
	interval time.Duration // 0: closed loop
	at       time.Time     // the next slot
}

func newSchedule(cfg Config, w int, start time.Time) *schedule {
	if cfg.Rate <= 0 {
		return &schedule{}
	}
	interval := time.Duration(float64(cfg.Callers) / cfg.Rate * float64(time.Second))
	// Callers take the slots in turn: caller w the w-th of every Callers.
	return &schedule{interval: interval, at: start.Add(time.Duration(float64(w) / cfg.Rate * float64(time.Second)))}
}

// next returns the time the next check counts from; false if ctx ended
// while waiting for it.
func (s *schedule) next(ctx context.Context) (time.Time, bool) {
	if s.interval == 0 {
		return time.Now(), true
	}
	at := s.at
	s.at = s.at.Add(s.interval)
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return time.Time{}, false
		}
	}
	return at, true
}
