package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Target labels used in reports.
const (
	TargetSDK  = "weir"      // the gateway SDK over gRPC
	TargetHTTP = "weir-http" // one JSON request per check to a node
	// TargetGateway: HTTP requests through `weir gateway` processes to an
	// upstream, one check each; TargetProxy: the same on a route no rule
	// matches (the proxy alone).
	TargetGateway = "weir-gateway"
	TargetProxy   = "gateway-proxy"
	// TargetPlainProxy: the same requests through a plain Go
	// httputil.ReverseProxy process (`weir plainproxy`), the baseline of
	// the two above.
	TargetPlainProxy = "plain-proxy"
	TargetRedis      = "redis"    // Redis + the Lua token bucket
	TargetRLS        = "weir-rls" // one Envoy ShouldRateLimit RPC per check to a node
	// TargetFloorGRPC and TargetFloorHTTP: the same requests as the RLS
	// and HTTP targets to a process answering each with a fixed reply
	// (`weir bench-floor`): what no server on that protocol can beat.
	TargetFloorGRPC = "floor-grpc"
	TargetFloorHTTP = "floor-http"
)

// Process roles of the CPU accounting (Config.Procs).
const (
	RoleNodes = "nodes"
	RoleFloor = "floor server"
)

// WriteTable prints results as an aligned table, then the accuracy detail
// of each run that has it, then each target's ratios to Redis when both
// ran the same scenario.
func WriteTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tscenario\tW\tG\tkeys\tdist\tchecks\tchecks/s\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\terrors\tallowed %\tscheduled/s\t")
	for _, r := range results {
		sched := "closed"
		if r.Rate > 0 {
			sched = fmt.Sprintf("%.0f", r.Rate)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%d\t%.1f\t%s\t\n",
			r.Target, r.Scenario, r.Callers, r.Gateways, r.Keys, r.Dist, r.Checks, r.PerSec,
			us(r.P50us), us(r.P90us), us(r.P99us), us(r.P999us), r.Errors, 100*r.AllowedShare(), sched)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	idled := map[string]bool{}
	for _, r := range results {
		if r.Rate > 0 {
			writeOpenLoop(w, r)
		}
		if r.FirstEr != "" {
			fmt.Fprintf(w, "%s/%s first error: %s\n", r.Target, r.Scenario, r.FirstEr)
		}
		if r.ItemsPerRPC > 0 {
			fmt.Fprintf(w, "%s/%s coalescing: %.1f checks per request (stream message or RPC)\n", r.Target, r.Scenario, r.ItemsPerRPC)
		}
		if r.ForwardMsgs > 0 {
			fmt.Fprintf(w, "%s/%s forwards: %.3f forward messages per check, %.2f items per forward message\n", r.Target, r.Scenario, r.ForwardMsgs, r.ItemsPerForward)
		}
		if r.LeaseHits+r.BlockedHits+r.AutoLeases > 0 && r.Checks > 0 {
			fmt.Fprintf(w, "%s/%s served at the gateway: %.1f%% from leases, %.1f%% by the blocked-until cache; %d automatic leases granted\n",
				r.Target, r.Scenario, 100*float64(r.LeaseHits)/float64(r.Checks), 100*float64(r.BlockedHits)/float64(r.Checks), r.AutoLeases)
		}
		if sp := r.Split; sp != nil && sp.Local > 0 && r.Checks > 0 {
			fmt.Fprintf(w, "%s/%s decided at the gateway: %.1f%% of checks, p50 %s µs, p99 %s µs; the others p50 %s µs, p99 %s µs\n", r.Target, r.Scenario,
				100*float64(sp.Local)/float64(r.Checks), us(sp.LocalP50us), us(sp.LocalP99us), us(sp.RemoteP50us), us(sp.RemoteP99us))
		}
		if len(r.CPU) > 0 {
			writeCPU(w, r)
			writeCounters(w, r)
		}
		if len(r.Idle) > 0 && !idled[r.Target+"/"+r.Scenario] {
			idled[r.Target+"/"+r.Scenario] = true // a paced target's runs share one sample
			writeIdle(w, r)
		}
		if r.Accuracy != nil {
			writeAccuracy(w, r)
		}
	}
	writeRedis(w, results)
	writeFloors(w, results)
	writePlainProxy(w, results)
	return nil
}

// writeCPU prints each role's CPU per check beside what the cores give.
func writeCPU(w io.Writer, r *Result) {
	fmt.Fprintf(w, "%s/%s CPU per check:", r.Target, r.Scenario)
	var sum float64
	for i, c := range r.CPU {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %s %.1f µs", sep, c.Role, c.PerCall)
		sum += c.PerCall
	}
	fmt.Fprintf(w, "; together %.1f µs of the %.1f µs the machine's cores give a check at this rate\n", sum, r.CPUAvail)
}

// writeAccuracy prints an accuracy run's verdict.
func writeAccuracy(w io.Writer, r *Result) {
	a := r.Accuracy
	fmt.Fprintf(w, "%s/%s accuracy over %.2fs: ideal %.0f per key; admitted %v; deviation", r.Target, r.Scenario, r.Elapsed, a.Ideal, a.Admitted)
	for _, d := range a.Deviation {
		fmt.Fprintf(w, " %+.2f%%", d)
	}
	fmt.Fprintf(w, "; worst %+.2f%% (%+.0f); gateway fairness (max deviation from equal share) %.2f%%\n", a.WorstDeviation, a.WorstExcess, a.Fairness)
	if st := a.Steady; st != nil {
		fmt.Fprintf(w, "%s/%s steady state [%.1fs, %.1fs): ideal %.0f per key (rate only); admitted %v; deviation", r.Target, r.Scenario, st.From, st.To, st.Ideal, st.Admitted)
		for _, d := range st.Deviation {
			fmt.Fprintf(w, " %+.2f%%", d)
		}
		fmt.Fprintf(w, "; worst %+.2f%%", st.Worst)
		if st.Thin >= 0 {
			fmt.Fprintf(w, "; %d of %d slots of %v admitted under half the rate, the others %+.2f%%", st.Thin, len(st.Slots), SteadySlot, st.OutsideThin)
		}
		fmt.Fprintln(w)
	}
	if a.LeaseBound > 0 && a.Ideal > 0 {
		fmt.Fprintf(w, "%s/%s lease bound: |admitted − ideal| ≤ lease × gateways = %d × %d = %d (%.2f%% of ideal); worst %+.0f\n",
			r.Target, r.Scenario, a.Lease, r.Gateways, a.LeaseBound, 100*float64(a.LeaseBound)/a.Ideal, a.WorstExcess)
	}
}

// samePace: two runs at one rate (both closed loop, one open-loop rate),
// or both at one share of their own capacity.
func samePace(a, b *Result) bool {
	return a.Rate == b.Rate || a.RatePct > 0 && a.RatePct == b.RatePct
}

// writeRedis prints each target's ratios to Redis's run at the same pace.
func writeRedis(w io.Writer, results []*Result) {
	for _, wr := range results {
		if wr.Target == TargetRedis {
			continue
		}
		for _, rr := range results {
			if rr.Target != TargetRedis || rr.Scenario != wr.Scenario || !samePace(wr, rr) {
				continue
			}
			fmt.Fprintf(w, "%s/redis %s: checks/s ×%.2f, p50 ×%.2f, p99 ×%.2f, p99.9 ×%.2f\n", wr.Target, wr.Scenario,
				ratio(wr.PerSec, rr.PerSec), ratio(wr.P50us, rr.P50us), ratio(wr.P99us, rr.P99us), ratio(wr.P999us, rr.P999us))
		}
	}
}

// writePlainProxy prints the gateway rows' ratios to the plain proxy.
func writePlainProxy(w io.Writer, results []*Result) {
	for _, pr := range results {
		if pr.Target != TargetPlainProxy {
			continue
		}
		for _, gr := range results {
			if gr.Target != TargetGateway && gr.Target != TargetProxy || gr.Scenario != pr.Scenario || !samePace(gr, pr) {
				continue
			}
			fmt.Fprintf(w, "%s/%s %s: req/s ×%.2f, p50 %+.2f ms (×%.2f), p99 ×%.2f\n", gr.Target, pr.Target, gr.Scenario,
				ratio(gr.PerSec, pr.PerSec), (gr.P50us-pr.P50us)/1000, ratio(gr.P50us, pr.P50us), ratio(gr.P99us, pr.P99us))
		}
	}
}

// The latency promised to gateways: at 30% of a path's capacity, open
// loop, p50 under PromiseP50 and p99 under PromiseP99.
const (
	PromiseP50us = 1000
	PromiseP99us = 5000
)

// writeOpenLoop prints an open-loop run's schedule and its p50 and p99
// against the promise.
func writeOpenLoop(w io.Writer, r *Result) {
	fmt.Fprintf(w, "%s/%s open loop: %.0f checks/s scheduled", r.Target, r.Scenario, r.Rate)
	switch {
	case r.RateFrom != "":
		fmt.Fprintf(w, " (the rate of %s's run)", r.RateFrom)
	case r.RatePct > 0:
		fmt.Fprintf(w, " (%g%% of the %.0f checks/s its closed loop reached in this run)", r.RatePct, r.Capacity)
	}
	fmt.Fprintf(w, "; latency counted from each check's scheduled time: p50 %.2f ms (promise < %g ms: %s), p99 %.2f ms (promise < %g ms: %s)\n",
		r.P50us/1000, PromiseP50us/1000.0, met(r.P50us < PromiseP50us), r.P99us/1000, PromiseP99us/1000.0, met(r.P99us < PromiseP99us))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// writeCounters prints each process role's system calls and context
// switches per check (the bench process's are the load generator's).
func writeCounters(w io.Writer, r *Result) {
	fmt.Fprintf(w, "%s/%s per check:", r.Target, r.Scenario)
	for i, c := range r.CPU {
		sep := ";"
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %s %.2f writes, %.2f reads, %.2f context switches (%.2f voluntary)", sep, c.Role, c.Writes, c.Reads, c.Switches, c.Voluntary)
		if c.Role == r.IdleRole && len(r.Idle) > 0 && r.Checks > 0 {
			o := r.overIdle(c)
			fmt.Fprintf(w, ", of which over their idle background %.1f µs, %.2f writes, %.2f reads, %.2f context switches", o.PerCall, o.Writes, o.Reads, o.Switches)
		}
	}
	fmt.Fprintln(w)
}

// overIdle is c less what r.Idle's processes spend idle over the run's
// elapsed time, per check: the part of a check's cost the check causes.
func (r *Result) overIdle(c CPUShare) CPUShare {
	per := r.Elapsed / float64(r.Checks) // seconds of the run per check
	for _, in := range r.Idle {
		c.PerCall -= in.CPUPct / 100 * per * 1e6
		c.Writes -= in.Writes * per
		c.Reads -= in.Reads * per
		c.Switches -= in.Switches * per
	}
	return c
}

// writeIdle prints each server process's idle background.
func writeIdle(w io.Writer, r *Result) {
	fmt.Fprintf(w, "%s/%s idle before the run (%s), per process:", r.Target, r.Scenario, r.IdleRole)
	for i, in := range r.Idle {
		sep := ";"
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %.1f%% of a core, %.0f writes/s, %.0f reads/s, %.0f context switches/s", sep, in.CPUPct, in.Writes, in.Reads, in.Switches)
	}
	fmt.Fprintln(w)
}

// Floors pairs each path with the floor target of its protocol.
var floors = map[string]string{TargetHTTP: TargetFloorHTTP, TargetRLS: TargetFloorGRPC}

// Server returns the CPU per check of the role that answers the checks:
// the nodes, or a floor's server (0 if the run did not measure it).
func (r *Result) Server() CPUShare {
	for _, c := range r.CPU {
		if c.Role == RoleNodes || c.Role == RoleFloor {
			return c
		}
	}
	return CPUShare{}
}

// writeFloors prints each path's server cost beside its floor's, for the
// runs at the same rate (both closed loop, or both open loop at one rate).
func writeFloors(w io.Writer, results []*Result) {
	for _, pr := range results {
		fl, ok := floors[baseTarget(pr.Target)]
		if !ok {
			continue
		}
		for _, fr := range results {
			if fr.Target != fl || fr.Scenario != pr.Scenario || fr.Rate != pr.Rate {
				continue
			}
			p, f := pr.Server(), fr.Server()
			fmt.Fprintf(w, "%s/%s %s: node CPU %.1f µs a check, floor %.1f µs a call (×%.2f); writes %.2f vs %.2f, context switches %.2f vs %.2f; checks/s ×%.2f\n",
				pr.Target, fr.Target, pr.Scenario, p.PerCall, f.PerCall, ratio(p.PerCall, f.PerCall), p.Writes, f.Writes, p.Switches, f.Switches, ratio(pr.PerSec, fr.PerSec))
		}
	}
}

// baseTarget is a target label without a "+tls" suffix.
func baseTarget(t string) string {
	b, _, _ := strings.Cut(t, "+")
	return b
}

// us prints microseconds: whole ones, with a decimal below 10 (a local
// decision takes well under one).
func us(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// WriteJSON prints r as one JSON line.
func WriteJSON(w io.Writer, r *Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
