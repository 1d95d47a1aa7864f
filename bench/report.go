package bench

import (
	"encoding/json"
	"fmt"
	"io"
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
)

// WriteTable prints results as an aligned table, then the accuracy detail
// of each run that has it, then each target's ratios to Redis when both
// ran the same scenario.
func WriteTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tscenario\tW\tG\tkeys\tdist\tchecks\tchecks/s\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\terrors\tallowed %\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%d\t%.1f\t\n",
			r.Target, r.Scenario, r.Callers, r.Gateways, r.Keys, r.Dist, r.Checks, r.PerSec,
			us(r.P50us), us(r.P90us), us(r.P99us), us(r.P999us), r.Errors, 100*r.AllowedShare())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.Rate > 0 {
			fmt.Fprintf(w, "%s/%s open loop: %.0f checks/s scheduled; latency counted from each check's scheduled time\n", r.Target, r.Scenario, r.Rate)
		}
		if r.FirstEr != "" {
			fmt.Fprintf(w, "%s/%s first error: %s\n", r.Target, r.Scenario, r.FirstEr)
		}
		if r.ItemsPerRPC > 0 {
			fmt.Fprintf(w, "%s/%s coalescing: %.1f checks per request (stream message or RPC)\n", r.Target, r.Scenario, r.ItemsPerRPC)
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
		if a := r.Accuracy; a != nil {
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
	}
	for _, wr := range results {
		if wr.Target == TargetRedis {
			continue
		}
		for _, rr := range results {
			if rr.Target != TargetRedis || rr.Scenario != wr.Scenario {
				continue
			}
			fmt.Fprintf(w, "%s/redis %s: checks/s ×%.2f, p50 ×%.2f, p99 ×%.2f, p99.9 ×%.2f\n", wr.Target, wr.Scenario,
				ratio(wr.PerSec, rr.PerSec), ratio(wr.P50us, rr.P50us), ratio(wr.P99us, rr.P99us), ratio(wr.P999us, rr.P999us))
		}
	}
	for _, pr := range results {
		if pr.Target != TargetPlainProxy {
			continue
		}
		for _, gr := range results {
			if gr.Target != TargetGateway && gr.Target != TargetProxy || gr.Scenario != pr.Scenario {
				continue
			}
			fmt.Fprintf(w, "%s/%s %s: req/s ×%.2f, p50 %+.2f ms (×%.2f), p99 ×%.2f\n", gr.Target, pr.Target, gr.Scenario,
				ratio(gr.PerSec, pr.PerSec), (gr.P50us-pr.P50us)/1000, ratio(gr.P50us, pr.P50us), ratio(gr.P99us, pr.P99us))
		}
	}
	return nil
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
