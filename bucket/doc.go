// Package bucket holds Weir's rate-limit algorithms as pure functions over a
// small state value and a caller-supplied clock reading.
//
// It owns the meaning of the counter state and nothing else: no I/O, no
// goroutines, no logging, no clock (every call takes now, in nanoseconds on
// any int64 clock; normally the owner's unix nanoseconds), no package-level
// mutable state. Callers (node shards, the gateway's local fallback bucket)
// keep one State, or one log for SlidingLog, per (rule, key), and must not
// call these functions concurrently on the same state; distinct states are
// independent.
//
// # Algorithms
//
// A Limit is Rate tokens per Period (any Period: "10 per 30s", "1000 per
// 24h"); a request costs a number of tokens. All arithmetic is exact integer
// arithmetic (128-bit intermediates), so long runs do not drift and no
// rounding lets an extra token through.
//
//   - TokenBucket: a bucket of Capacity() = Burst tokens (Rate if Burst is
//     0), refilled continuously at Rate per Period. A request passes iff the
//     bucket holds its cost. State: A = time of the last change, B = whole
//     tokens missing at A, C = missing fraction in 1/Period token.
//   - LeakyBucket: the GCRA form of the leaky-bucket meter. Each token moves
//     a theoretical arrival time (TAT) Period/Rate further; a request passes
//     iff the TAT it would leave is at most Burst×Period/Rate after now. It
//     admits exactly the same sequences as TokenBucket with the same limit
//     (the two are duals) but stores one timestamp instead of a count; with
//     Burst 1 it admits strictly evenly spaced requests. State: A = TAT in ns,
//     B = TAT fraction in 1/Rate ns, C = latest time seen.
//   - FixedWindow: a count per window [k×Period, (k+1)×Period). At most Rate
//     per window, so at most 2×Rate across a window boundary. State: A =
//     window start, B = count. With Limit.Calendar the windows are the
//     days, weeks (from Monday), months or years of Limit.Zone instead,
//     from local midnight to local midnight, so a day across a
//     daylight-saving change lasts 23 or 25 hours; C = the window's length
//     (calendar.go).
//   - SlidingWindow: the previous window's count weighted by its overlap with
//     the sliding window (now-Period, now], plus the current window's count
//     (Cloudflare's design). Cheap and smooth, approximate: tokens bunched at
//     the end of the previous window are undercounted, so an interval of one
//     Period can see up to 2×Rate; each aligned window still sees at most
//     Rate. State: A = current window start, B = current count, C = previous
//     count.
//   - SlidingLog: exact; at most Rate tokens in any interval (now-Period, now].
//     Its state is a log of one timestamp per admitted token, so its memory
//     grows with Rate and Limit.Validate caps it; use DecideLog, RefundLog and
//     FullLog.
//
// Burst is ignored by the window algorithms. A State is 24 bytes and its zero
// value is fresh for every algorithm; so is an empty log.
//
// # Answers
//
// Decide returns whether the request passes, the whole tokens remaining,
// Capacity() as Limit, ResetAfter (time until the state is fresh again, 0 if
// it is) and RetryAfter (0 if allowed, else the exact wait after which the
// same cost passes if nothing else is taken meanwhile). A cost above
// Capacity() can never pass: RetryAfter is Never (-1), as for a negative
// cost or a limit with Rate or Period <= 0 (which blocks everything, so a
// rate-0 override blocks). Cost 0 is a peek. A denied call and a peek return
// the state unchanged.
//
// # Clock rules
//
// Time going backwards (a clock step, or a state written by another node
// whose clock is ahead) never creates tokens: a now earlier than what the
// state has seen counts as no time elapsed. TokenBucket and LeakyBucket keep
// the time they last saw; the windows stay in the state's window (the
// sliding window reads it at the window's start, its most conservative
// point); SlidingLog treats now as its newest entry. RetryAfter and
// ResetAfter are measured from the caller's now, so they include the time
// until its clock catches up. The other way, a state read on a clock ahead
// of its writer's would see that much more time passed: Later moves it
// onto the reader's clock first (nodes do this for every counter state
// they receive). A window keeps its state's own grid once started (the
// windows of a fresh state start on the period's grid), so a state moved
// by Later rolls exactly when its writer's would; a calendar window keeps
// its start and length (A and C), so it too ends when its writer's would,
// and the next one is the calendar window holding the reader's now.
//
// Calendar boundaries are computed from the given now and the zone in
// Limit.Calendar only
// (time.Date over the zone the caller loaded), never from a clock.
//
// A state written under another limit (a rule edit) is read under the new
// one and never counts as more than empty: a bucket deficit is capped at
// Capacity(), window counts at Rate.
//
// # Idle expiry
//
// Full(s, l, now) reports that s behaves like the zero State from now on, so
// the caller may drop it. Limit.IdleAfter bounds how long after its last
// change a state becomes Full on a clock that does not go backwards: the
// time to refill a whole bucket, one Period for FixedWindow and SlidingLog,
// two Periods for SlidingWindow, the longest window of the unit for a
// calendar FixedWindow (Unit.Longest).
//
// # Refunds
//
// Refund (RefundLog) gives back tokens taken earlier: to undo an
// all-or-nothing group or return an unspent lease. It never raises a bucket
// above Capacity() nor a count below zero; a refund into a window that has
// rolled away is partly or wholly lost.
//
// # Limits of the numbers
//
// Limit.Validate rejects Rate or Burst above MaxTokens and limits that take
// longer than MaxIdle (about 73 years) to refill, so that every intermediate
// fits; rate 1e9 per 365 days is fine. The clock readings one state sees
// must lie within about 70 years (2^61 ns) of one another. Decide does not validate beyond Rate
// and Period > 0: unvalidated huge limits saturate instead of overflowing.
package bucket
