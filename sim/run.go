package sim

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirlimit/weir/ring"
)

// Outcome is what one run found.
type Outcome struct {
	Seed       uint64
	Nodes      int
	Faults     []Fault
	Trace      string // the hash of the canonical trace
	Records    int
	Violations []Violation
	Err        error // the simulation itself failed (a part returned an error, a stray coroutine)
	Readable   []string

	Checks, Admitted, Refused, Unavailable, Late int
	// Known limits met (docs/design.md, "Simulator bounds"): admissions
	// on released counters after quiescence, admissions on no counters,
	// replicas skipped after a flap of their view or an unseen restart.
	KnownReleased, KnownLands, KnownFlapCopies, CopyGaps, KnownTwoHolders, KnownRestarts, KnownSpread, KnownWaits, KnownFirstCopy int
	QuietFrom                                                                                                                     time.Duration
}

// Failed reports whether the run broke an invariant or could not run.
func (o Outcome) Failed() bool { return o.Err != nil || len(o.Violations) > 0 }

// Verdict is "pass", or the first broken invariant's name, or "error".
func (o Outcome) Verdict() string {
	switch {
	case o.Err != nil:
		return "error"
	case len(o.Violations) > 0:
		return o.Violations[0].Invariant
	}
	return "pass"
}

func (o Outcome) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d nodes %d: %s; %d checks, %d admitted, %d refused, %d unavailable, %d late; quiet from %s; %d records; known limits met: %d released, %d lands, %d flap copies, %d copy gaps, %d two holders, %d unseen restarts, %d spreading, %d waited-out asks, %d first copies\n",
		o.Seed, o.Nodes, o.Verdict(), o.Checks, o.Admitted, o.Refused, o.Unavailable, o.Late, o.QuietFrom, o.Records, o.KnownReleased, o.KnownLands, o.KnownFlapCopies, o.CopyGaps, o.KnownTwoHolders, o.KnownRestarts, o.KnownSpread, o.KnownWaits, o.KnownFirstCopy)
	if o.Err != nil {
		fmt.Fprintf(&b, "error: %v\n", o.Err)
	}
	for _, v := range o.Violations {
		fmt.Fprintf(&b, "violation %s\n", v)
	}
	return b.String()
}

// Run runs one seed: n nodes boot, the faults (opt.Faults, or drawn from
// the seed) strike while the workload runs, then the run waits for
// quiescence and judges the quiet window and the final state.
func Run(opt Options) Outcome {
	if opt.Faults == nil {
		opt.Faults = generate(opt.Seed, opt.Nodes, opt.Duration, aims{opt.TwoRings, opt.RecutJoin, opt.JoinLeave, opt.RecutDelay, opt.RecutLoss, opt.FlapCut})
	}
	w := newWorld(opt)
	w.rpcAllowance = !opt.Strict
	out := Outcome{Seed: opt.Seed, Nodes: opt.Nodes, Faults: opt.Faults}
	for i := 1; i <= opt.Nodes; i++ {
		w.newHost(nodeID(i))
	}
	w.next = opt.Nodes + 1
	for _, id := range slices.Clone(w.order) {
		w.boot(w.hosts[id])
	}
	w.gossip()
	w.raft()
	faultEnd := opt.Duration * 65 / 100
	for _, f := range opt.Faults {
		w.apply(f)
		faultEnd = max(faultEnd, f.At+f.For+time.Duration(f.Steps)*healStep)
	}
	w.workEnd = opt.Duration
	w.workload()
	l := w.loop
	step := func(until time.Duration) bool {
		if err := l.runUntil(until); err != nil {
			w.fail(err)
		}
		return w.err == nil
	}
	ok := step(faultEnd)
	limit := faultEnd + 60*time.Second
	for ok {
		if w.quiescent() {
			w.oracle.quietFrom = l.now + quietAfter
			w.loop.after(quietAfter, w.oracle.rebase)
			break
		}
		if l.now >= limit {
			w.oracle.violate("InvQuiescent", "no quiescence %s after the last fault", limit-faultEnd)
			break
		}
		ok = step(l.now + 500*time.Millisecond)
	}
	if ok && w.oracle.quietFrom < limit+time.Hour {
		w.workEnd = max(opt.Duration, w.oracle.quietFrom+10*time.Second)
		if ok = step(w.workEnd); ok {
			ok = step(w.workEnd + 2*checkDeadline)
		}
		if ok {
			w.oracle.final()
		}
	}
	for _, id := range w.order {
		w.stop(w.hosts[id])
	}
	if l.live != 0 && w.err == nil {
		w.fail(fmt.Errorf("%w: %d coroutines left after the run", ErrSim, l.live))
	}
	o := &w.oracle
	out.Err, out.Violations = w.err, o.violation
	out.Trace, out.Records, out.Readable = l.sum(), l.records, l.readable
	out.Checks, out.Admitted, out.Refused, out.Unavailable, out.Late = o.checks, o.admitted, o.refused, o.unavail, o.late
	out.QuietFrom = o.quietFrom
	out.KnownReleased, out.KnownLands, out.KnownFlapCopies, out.CopyGaps, out.KnownTwoHolders, out.KnownRestarts, out.KnownSpread, out.KnownWaits, out.KnownFirstCopy = o.knownReleased, o.knownLands, o.knownFlapCopies, o.copyGaps, o.knownTwoHolders, o.knownRestarts, o.knownSpread, o.knownWaits, o.knownFirstCopy
	if o.quietFrom > limit+time.Hour {
		out.QuietFrom = 0
	}
	return out
}

// Shrink removes faults from a failing schedule while it still fails
// with the same verdict (delta debugging, ddmin), and returns the
// smaller schedule with its outcome.
func Shrink(opt Options, budget int) ([]Fault, Outcome) {
	first := Run(opt)
	want := first.Verdict()
	faults := slices.Clone(first.Faults)
	best := first
	fails := func(fs []Fault) bool {
		if budget <= 0 {
			return false
		}
		budget--
		o := opt
		o.Faults = append([]Fault{}, fs...)
		got := Run(o)
		if got.Verdict() == want {
			best = got
			return true
		}
		return false
	}
	n := 2
	for len(faults) >= 2 && budget > 0 {
		chunk := (len(faults) + n - 1) / n
		reduced := false
		for i := 0; i < len(faults); i += chunk {
			rest := slices.Concat(faults[:i], faults[min(i+chunk, len(faults)):])
			if fails(rest) {
				faults, n, reduced = rest, max(n-1, 2), true
				break
			}
		}
		if !reduced {
			if n >= len(faults) {
				break
			}
			n = min(2*n, len(faults))
		}
	}
	if len(faults) == 1 && fails(nil) {
		faults = nil
	}
	return faults, best
}

// Case is a kept schedule with its expected verdict (sim/testdata).
type Case struct {
	Name   string
	Seed   uint64
	Nodes  int
	For    time.Duration
	Expect string
	Strict bool        // judge the known limits as violations
	Ring   ring.Config // zero: production's shape (a `ring` line: shape.go)
	Faults []Fault
	Note   []string
}

// Options returns the run the case describes.
func (c Case) Options() Options {
	o := DefaultOptions(c.Seed, c.Nodes)
	if c.For > 0 {
		o.Duration = c.For
	}
	o.Faults = append([]Fault{}, c.Faults...)
	o.Strict = c.Strict
	o.Ring = c.Ring
	return o
}

// ParseCase reads a case file: `# notes`, then `seed S`, `nodes N`,
// `duration D`, `expect VERDICT`, `ring SHAPE` (ParseRing; none:
// production's shape) and `fault ...` lines.
func ParseCase(name string, r io.Reader) (Case, error) {
	c := Case{Name: name, Faults: []Fault{}}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			c.Note = append(c.Note, line)
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		var err error
		switch k {
		case "seed":
			c.Seed, err = strconv.ParseUint(v, 10, 64)
		case "nodes":
			c.Nodes, err = strconv.Atoi(v)
		case "duration":
			c.For, err = time.ParseDuration(v)
		case "expect":
			c.Expect = v
		case "strict":
			c.Strict = true
		case "ring":
			c.Ring, err = ParseRing(v, c.Nodes)
		case "fault":
			var f Fault
			if f, err = ParseFault(v); err == nil {
				c.Faults = append(c.Faults, f)
			}
		default:
			err = fmt.Errorf("unknown line")
		}
		if err != nil {
			return Case{}, fmt.Errorf("%w: %s: %q: %v", ErrSim, name, line, err)
		}
	}
	if c.Nodes < 1 || c.Expect == "" {
		return Case{}, fmt.Errorf("%w: %s: needs nodes and expect", ErrSim, name)
	}
	return c, sc.Err()
}

// Format writes c as ParseCase reads it.
func (c Case) Format() string {
	var b strings.Builder
	for _, n := range c.Note {
		b.WriteString(n + "\n")
	}
	fmt.Fprintf(&b, "seed %d\nnodes %d\n", c.Seed, c.Nodes)
	if c.For > 0 {
		fmt.Fprintf(&b, "duration %s\n", c.For)
	}
	fmt.Fprintf(&b, "expect %s\n", c.Expect)
	if c.Strict {
		b.WriteString("strict\n")
	}
	if r := formatRing(c.Ring); r != "" {
		fmt.Fprintf(&b, "ring %s\n", r)
	}
	for _, f := range c.Faults {
		fmt.Fprintf(&b, "fault %s\n", f)
	}
	return b.String()
}
