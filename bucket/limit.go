package bucket

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Errors returned (wrapped) by Limit.Validate.
var (
	ErrInvalidLimit = errors.New("bucket: invalid limit")
	ErrLogTooLarge  = errors.New("bucket: sliding log too large")
)

const (
	// MaxTokens bounds Rate and Burst, so that counts and costs can be added
	// without overflow.
	MaxTokens = 1 << 53
	// MaxIdle bounds the time a limit needs to go back to fresh
	// (Limit.IdleAfter): about 73 years. It keeps every timestamp the
	// algorithms compute inside int64 for any clock before year 2200.
	MaxIdle time.Duration = 1 << 61
	// DefaultMaxLog is the cap on the Rate of a sliding_log limit that the
	// rules package enforces (each admitted token costs 8 bytes of log for
	// one Period, so 80 KB per key at the cap).
	DefaultMaxLog = 10000
)

// Limit is Rate tokens per Period.
//
// Burst is the bucket size for TokenBucket and the burst tolerance for
// LeakyBucket (the number of tokens that may be taken at once from a fresh
// bucket); 0 means Burst = Rate. The window algorithms (FixedWindow,
// SlidingWindow, SlidingLog) allow Rate per Period and ignore Burst.
//
// A Limit with Rate <= 0 or Period <= 0 is invalid; Decide treats it as
// "block everything" rather than failing, so a rate-0 override blocks.
//
// Calendar, when not nil (FixedWindow only), aligns the windows to a
// zone's calendar instead of multiples of Period: Rate per day, week,
// month or year, each window as long as the calendar makes it (see
// Calendar). Period is then only what reports give as the window's length
// (Unit.Nominal). The zone comes in with the limit, so the package still
// reads no clock and no zone database.
//
// The package's own helpers take *Limit: five words copied into every
// call cost fixed_window's Decide about half its time (BenchmarkDecide,
// 108 → 61 ns when they went).
type Limit struct {
	Algorithm Algorithm
	Rate      int64
	Period    time.Duration
	Burst     int64
	Calendar  *Calendar
}

// calendar reports whether l's windows follow a calendar.
func (l Limit) calendar() bool {
	return l.Calendar != nil && l.Calendar.Unit != NoUnit && l.Algorithm == FixedWindow && l.Calendar.Unit.valid()
}

// Capacity is what a full bucket or an empty window allows: Burst (or Rate
// when Burst is 0) for the buckets, Rate for the windows.
func (l Limit) Capacity() int64 {
	if l.Burst > 0 && (l.Algorithm == TokenBucket || l.Algorithm == LeakyBucket) {
		return l.Burst
	}
	return l.Rate
}

// IdleAfter is how long after its last change a state is certainly fresh
// again (Full), given a clock that does not go backwards: the time to refill
// a whole bucket for TokenBucket and LeakyBucket, one Period for FixedWindow
// and SlidingLog, two Periods for SlidingWindow, the longest window of its
// unit for a calendar limit (Unit.Longest). It is 0 for an invalid
// limit.
func (l Limit) IdleAfter() time.Duration {
	if l.Rate <= 0 || l.Period <= 0 {
		return 0
	}
	if l.calendar() {
		return l.Calendar.Unit.Longest()
	}
	switch l.Algorithm {
	case TokenBucket, LeakyBucket:
		return time.Duration(sat(mul(uint64(l.Capacity()), uint64(l.Period)).divCeil(uint64(l.Rate))))
	case SlidingWindow:
		if l.Period > math.MaxInt64/2 {
			return math.MaxInt64
		}
		return 2 * l.Period
	default:
		return l.Period
	}
}

// Validate reports whether l can be enforced. maxLog caps Rate for
// SlidingLog (whose state holds one timestamp per token). Errors wrap
// ErrInvalidLimit, and also ErrLogTooLarge for an oversized sliding log.
func (l Limit) Validate(maxLog int64) error {
	switch {
	case !l.Algorithm.valid():
		return fmt.Errorf("%w: %w: %d", ErrInvalidLimit, ErrUnknownAlgorithm, l.Algorithm)
	case l.Rate <= 0:
		return fmt.Errorf("%w: rate must be positive, got %d", ErrInvalidLimit, l.Rate)
	case l.Period <= 0:
		return fmt.Errorf("%w: period must be positive, got %v", ErrInvalidLimit, l.Period)
	case l.Burst < 0:
		return fmt.Errorf("%w: burst must not be negative, got %d", ErrInvalidLimit, l.Burst)
	case l.Rate > MaxTokens:
		return fmt.Errorf("%w: rate %d above the maximum %d", ErrInvalidLimit, l.Rate, int64(MaxTokens))
	case l.Burst > MaxTokens:
		return fmt.Errorf("%w: burst %d above the maximum %d", ErrInvalidLimit, l.Burst, int64(MaxTokens))
	case l.Calendar != nil && (!l.Calendar.Unit.valid() || l.Calendar.Unit == NoUnit):
		return fmt.Errorf("%w: %w: %d", ErrInvalidLimit, ErrUnknownCalendar, l.Calendar.Unit)
	case l.Calendar != nil && l.Algorithm != FixedWindow:
		return fmt.Errorf("%w: calendar windows (%s) need fixed_window, not %s", ErrInvalidLimit, l.Calendar.Unit, l.Algorithm)
	case l.Algorithm == Concurrency && l.Rate > maxLog:
		return fmt.Errorf("%w: %w: concurrency limit %d above the maximum %d", ErrInvalidLimit, ErrLogTooLarge, l.Rate, maxLog)
	case l.Algorithm == SlidingLog && l.Rate > maxLog:
		return fmt.Errorf("%w: %w: sliding_log rate %d above the maximum %d (use sliding_window)", ErrInvalidLimit, ErrLogTooLarge, l.Rate, maxLog)
	}
	if idle := l.IdleAfter(); idle > MaxIdle {
		return fmt.Errorf("%w: %d per %v with burst %d takes %v to refill, above the maximum %v",
			ErrInvalidLimit, l.Rate, l.Period, l.Capacity(), idle, MaxIdle)
	}
	return nil
}

// usable reports whether Decide can apply l at all.
func (l Limit) usable() bool { return l.Rate > 0 && l.Period > 0 }
