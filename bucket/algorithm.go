package bucket

import (
	"errors"
	"fmt"
	"strconv"
)

// Algorithm selects how a Limit is enforced.
type Algorithm uint8

// The algorithms. The zero value is TokenBucket, the default.
const (
	TokenBucket   Algorithm = iota // rate + burst; continuous exact refill
	LeakyBucket                    // GCRA: theoretical arrival time, burst tolerance
	FixedWindow                    // counter per period-aligned window
	SlidingWindow                  // previous window weighted by overlap + current window
	SlidingLog                     // exact log of admission times (use DecideLog)
	Concurrency                    // permits held at once (use TakePermit): Rate permits, each for at most Period
)

var algorithmNames = [...]string{
	TokenBucket:   "token_bucket",
	LeakyBucket:   "leaky_bucket",
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
	Concurrency:   "concurrency",
}

// ErrUnknownAlgorithm is returned (wrapped) for an algorithm name or value
// that is not one of the constants above.
var ErrUnknownAlgorithm = errors.New("bucket: unknown algorithm")

// ParseAlgorithm maps the rules-file name of an algorithm to its value.
// The empty string means TokenBucket.
func ParseAlgorithm(s string) (Algorithm, error) {
	if s == "" {
		return TokenBucket, nil
	}
	for a, name := range algorithmNames {
		if s == name {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want token_bucket, leaky_bucket, fixed_window, sliding_window, sliding_log or concurrency)", ErrUnknownAlgorithm, s)
}

// String returns the rules-file name, or "algorithm(N)" for an unknown value.
func (a Algorithm) String() string {
	if a.valid() {
		return algorithmNames[a]
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

func (a Algorithm) valid() bool { return int(a) < len(algorithmNames) }

// MarshalText implements encoding.TextMarshaler (YAML, JSON).
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.valid() {
		return nil, fmt.Errorf("%w: %d", ErrUnknownAlgorithm, a)
	}
	return []byte(algorithmNames[a]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler using ParseAlgorithm.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}
