package rules

import (
	"errors"
	"fmt"
	"strconv"
)

// MaxCost is the most tokens one request may take.
const MaxCost = 1_000_000

// ErrBadCost: a request's cost header does not hold a valid cost.
var ErrBadCost = errors.New("rules: bad cost")

// RequestCost is the tokens a request takes under the rules it matched,
// the same under every one of them (they are decided all or nothing): the
// largest of the rules' costs, where a rule's cost is its CostHeader's
// value when the request carries that header (header reads it), else its
// Cost, else 1. A header value that is not a whole number from 1 to
// MaxCost is ErrBadCost, so a caller answers 400 and takes nothing. The
// gateway middleware and any other edge that matches requests (e.g. a
// forward-auth endpoint) call it with the rules Match returned.
func RequestCost(matched []*Rule, header func(name string) string) (int64, error) {
	cost := int64(1)
	for _, r := range matched {
		c := r.Cost
		if r.CostHeader != "" && header != nil {
			if v := header(r.CostHeader); v != "" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 1 || n > MaxCost {
					return 0, fmt.Errorf("%w: header %s: %q is not a whole number from 1 to %d", ErrBadCost, r.CostHeader, truncate(v, 32), MaxCost)
				}
				c = n
			}
		}
		cost = max(cost, c)
	}
	return cost, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
