package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// ErrInput reports arguments the maths cannot use (empty samples, a
// quantile outside [0, 1], a negative count).
var ErrInput = errors.New("bench: invalid input")

// Percentile returns the q-quantile (0 ≤ q ≤ 1) of sorted by the
// nearest-rank method: the smallest sample such that at least q·n samples
// are ≤ it. q = 0 gives the minimum. sorted must be ascending.
func Percentile(sorted []time.Duration, q float64) (time.Duration, error) {
	n := len(sorted)
	if n == 0 {
		return 0, fmt.Errorf("%w: no samples", ErrInput)
	}
	if math.IsNaN(q) || q < 0 || q > 1 {
		return 0, fmt.Errorf("%w: quantile %v not in [0, 1]", ErrInput, q)
	}
	rank := int(math.Ceil(q * float64(n))) // 1-based
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1], nil
}

// Latencies summarises a set of latency samples.
type Latencies struct {
	N                   int
	P50, P90, P99, P999 time.Duration
	Max                 time.Duration
}

// Summarize sorts samples in place and returns their percentiles; zero
// Latencies for no samples.
func Summarize(samples []time.Duration) Latencies {
	if len(samples) == 0 {
		return Latencies{}
	}
	slices.Sort(samples)
	p := func(q float64) time.Duration {
		d, _ := Percentile(samples, q) // q is a constant in range, n > 0
		return d
	}
	return Latencies{
		N: len(samples), P50: p(0.50), P90: p(0.90), P99: p(0.99), P999: p(0.999),
		Max: samples[len(samples)-1],
	}
}
