package bench

import (
	"context"
	"fmt"
	"time"
)

// Pace says how RunPaced sets a target's open-loop rate from its capacity.
type Pace struct {
	// Pct > 0: first a closed-loop run of Capacity (the target's capacity
	// in this run), then the open loop at Pct percent of its checks/s.
	Pct      float64
	Capacity time.Duration
	// Rate > 0 (with Pct): the open loop at this rate instead, the one
	// RateFrom's run used (a floor at its path's rate).
	Rate     float64
	RateFrom string
}

// RunPaced runs cfg as Run does when p.Pct is 0. Otherwise it measures
// the target's capacity with a closed-loop run of p.Capacity (its own
// keys), then runs the open loop at p.Pct of it (or at p.Rate), and
// returns both results, the capacity's first.
func RunPaced(ctx context.Context, cfg Config, sc Scenario, f Factory, p Pace) ([]*Result, error) {
	if p.Pct == 0 {
		r, err := Run(ctx, cfg, sc, f)
		if err != nil {
			return nil, err
		}
		return []*Result{r}, nil
	}
	if p.Pct < 0 || p.Pct > 100 || p.Capacity <= 0 || p.Rate < 0 {
		return nil, fmt.Errorf("%w: pace %+v: a percentage in (0, 100] and a capacity run > 0", ErrInput, p)
	}
	capCfg := cfg
	capCfg.Rate, capCfg.Duration, capCfg.Count, capCfg.KeyPrefix = 0, p.Capacity, 0, cfg.KeyPrefix+"capacity:"
	capR, err := Run(ctx, capCfg, sc, f)
	if err != nil {
		return nil, fmt.Errorf("capacity run: %w", err)
	}
	cfg.Rate = p.Rate
	if cfg.Rate == 0 {
		cfg.Rate = capR.PerSec * p.Pct / 100
	}
	if cfg.Rate <= 0 {
		return nil, fmt.Errorf("bench: capacity run of %s answered no check (first error: %s)", cfg.Target, capR.FirstEr)
	}
	r, err := Run(ctx, cfg, sc, f)
	if err != nil {
		return nil, err
	}
	r.Capacity = capR.PerSec
	if p.Rate > 0 {
		r.RateFrom = p.RateFrom
	} else {
		r.RatePct = p.Pct
	}
	return []*Result{capR, r}, nil
}
