package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints results as an aligned table, then the accuracy detail
// of each run that has it, then the Weir/Redis ratios when both targets
// ran the same scenario.
func WriteTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tscenario\tW\tG\tkeys\tdist\tchecks\tchecks/s\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\terrors\tallowed %\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%.1f\t\n",
			r.Target, r.Scenario, r.Callers, r.Gateways, r.Keys, r.Dist, r.Checks, r.PerSec,
			r.P50us, r.P90us, r.P99us, r.P999us, r.Errors, 100*r.AllowedShare())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.FirstEr != "" {
			fmt.Fprintf(w, "%s/%s first error: %s\n", r.Target, r.Scenario, r.FirstEr)
		}
		if a := r.Accuracy; a != nil {
			fmt.Fprintf(w, "%s/%s accuracy over %.2fs: ideal %.0f per key; admitted %v; deviation", r.Target, r.Scenario, r.Elapsed, a.Ideal, a.Admitted)
			for _, d := range a.Deviation {
				fmt.Fprintf(w, " %+.2f%%", d)
			}
			fmt.Fprintf(w, "; worst %+.2f%%; gateway fairness (max deviation from equal share) %.2f%%\n", a.WorstDeviation, a.Fairness)
		}
	}
	for _, wr := range results {
		if wr.Target != "weir" {
			continue
		}
		for _, rr := range results {
			if rr.Target != "redis" || rr.Scenario != wr.Scenario {
				continue
			}
			fmt.Fprintf(w, "weir/redis %s: checks/s ×%.2f, p50 ×%.2f, p99 ×%.2f, p99.9 ×%.2f\n", wr.Scenario,
				ratio(wr.PerSec, rr.PerSec), ratio(wr.P50us, rr.P50us), ratio(wr.P99us, rr.P99us), ratio(wr.P999us, rr.P999us))
		}
	}
	return nil
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
