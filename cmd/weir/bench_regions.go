package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/weirlimit/weir/bench"
)

// benchRegions runs a scenario with Regions: one spawned cluster of spawn
// nodes per region, peered, the same keys under one global rule, callers
// in the first region and half as many in the second (unequal demand), all
// at once. It emits each loaded region's result (latency as its gateways
// see it) and one for all regions together, whose accuracy is the global
// count against the one global limit. latency delays every exchange
// between regions by that much each way (a loopback proxy per link). The
// nodes run from bin.
func benchRegions(ctx context.Context, cfg bench.Config, sc bench.Scenario, run string, spawn int, target string, sdk bench.SDKOptions,
	latency time.Duration, bin string, logw io.Writer, emit func(*bench.Result) error) error {
	regs, err := bench.SpawnRegions(ctx, bin, sc.Regions, spawn, logw, latency)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range regs {
			s.Close()
		}
	}()
	for _, name := range sc.Regions {
		sp := regs[name]
		if err := bench.ApplyRules(ctx, sp.Nodes()[0].HTTP, sc.RulesYAML(), sc.RuleIDs(), sp.GRPCAddrs(), nil, nil); err != nil {
			return fmt.Errorf("region %s: %w", name, err)
		}
	}
	type out struct {
		r   *bench.Result
		err error
	}
	// One epoch for both regions' runs, so their steady windows are the
	// same span of time and add up against the one global limit.
	if cfg.Settle == 0 && cfg.Duration > regionsSettle {
		cfg.Settle = regionsSettle
	}
	cfg.Epoch = time.Now()
	outs := make([]chan out, 0, 2)
	for i, name := range sc.Regions[:min(2, len(sc.Regions))] {
		rc := cfg
		rc.Callers = max(1, cfg.Callers>>i)
		rc.Gateways = max(1, min(cfg.Gateways, rc.Callers))
		rc.KeyPrefix = run + ":regions:" // the same keys in every region
		var factory bench.Factory
		if target == "http" {
			cl, err := bench.ReadCluster(ctx, regs[name].GRPCAddrs(), nil)
			if err != nil {
				return err
			}
			rc.Target = bench.TargetHTTP + "@" + name
			factory = bench.HTTPFactory(cl.HTTPAddrs(), (rc.Callers+rc.Gateways-1)/rc.Gateways, nil)
		} else {
			rc.Target, rc.Leases = bench.TargetSDK+"@"+name, true
			o := sdk
			o.GatewayPrefix = run + "-" + name
			factory = bench.SDKFactory(ctx, regs[name].GRPCAddrs(), o)
		}
		ch := make(chan out, 1)
		outs = append(outs, ch)
		go func() {
			r, err := bench.Run(ctx, rc, sc, factory)
			ch <- out{r, err}
		}()
	}
	label := bench.TargetSDK
	if target == "http" {
		label = bench.TargetHTTP
	}
	var firstErr error
	var rs []*bench.Result
	for _, ch := range outs {
		o := <-ch
		if o.err != nil {
			firstErr = o.err
			continue
		}
		if err := emit(o.r); err != nil {
			return err
		}
		rs = append(rs, o.r)
	}
	if firstErr != nil {
		return firstErr
	}
	all, err := regionsTotal(label+"@all", sc, rs)
	if err != nil {
		return err
	}
	return emit(all)
}

// regionsTotal is one result for the regions' runs together: their sums,
// and the accuracy of the global count against the one global limit.
func regionsTotal(label string, sc bench.Scenario, rs []*bench.Result) (*bench.Result, error) {
	var steady *bench.SteadyResult
	all := &bench.Result{Target: label, Scenario: sc.Name, Keys: sc.Keys, Dist: "uniform",
		Rules: len(sc.Rules), Accuracy: &bench.AccuracyResult{Admitted: make([]int64, sc.Keys), Deviation: make([]float64, sc.Keys)}}
	for _, r := range rs {
		all.Callers += r.Callers
		all.Gateways += r.Gateways
		all.Checks += r.Checks
		all.Allowed += r.Allowed
		all.Errors += r.Errors
		all.PerSec += r.PerSec
		all.Elapsed = max(all.Elapsed, r.Elapsed)
		if r.Accuracy == nil {
			continue
		}
		all.Accuracy.Ideal = max(all.Accuracy.Ideal, r.Accuracy.Ideal)
		for k, v := range r.Accuracy.Admitted {
			all.Accuracy.Admitted[k] += v
		}
		if st := r.Accuracy.Steady; st != nil {
			if steady == nil {
				steady = &bench.SteadyResult{From: st.From, To: st.To, Ideal: st.Ideal, Admitted: make([]int64, sc.Keys),
					Slots: make([]int64, len(st.Slots))}
			}
			for k, v := range st.Admitted {
				steady.Admitted[k] += v
			}
			for i, v := range st.Slots {
				if i < len(steady.Slots) {
					steady.Slots[i] += v
				}
			}
		}
	}
	a := all.Accuracy
	for k, adm := range a.Admitted {
		d, err := bench.Deviation(adm, a.Ideal)
		if err != nil {
			return nil, err
		}
		a.Deviation[k] = d
		if abs(d) > abs(a.WorstDeviation) {
			a.WorstDeviation, a.WorstExcess = d, float64(adm)-a.Ideal
		}
	}
	if steady != nil {
		if err := steady.SteadyFill(); err != nil {
			return nil, err
		}
		steady.CountThin()
		a.Steady = steady
	}
	return all, nil
}

// regionsSettle is when the regions scenario's steady window starts
// (unless --settle says otherwise): twelve exchange intervals after the
// start, by when a key's share has moved from its home region to the
// regions that ask for it.
const regionsSettle = 3 * time.Second

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
