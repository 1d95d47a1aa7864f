package bucket

import "math"

// Later returns s as it must be read on a clock that runs d ns ahead of
// the one that wrote it (d > 0), so that the reader grants nothing the
// writer would not have granted at the same instant: word A, a time for
// every algorithm (TokenBucket's last change, LeakyBucket's TAT, the
// windows' start), moves d later. A window start moved off its period's
// grid is kept until that window ends (see fixedRoll and slidingRoll),
// which holds the count at least as long as the writer would. A reader
// whose clock is behind (d <= 0) needs nothing: it counts the writer's
// later times as no time passed, so s is returned as it is. A fresh state
// stays fresh.
func Later(s State, d int64) State {
	if d <= 0 || s == (State{}) {
		return s
	}
	s.A = satAdd(s.A, d)
	return s
}

// LaterLog is Later for a SlidingLog's log: every entry moves d later. It
// returns a new slice when it moves anything.
func LaterLog(log []int64, d int64) []int64 {
	if d <= 0 || len(log) == 0 {
		return log
	}
	out := make([]int64, len(log))
	for i, t := range log {
		out[i] = satAdd(t, d)
	}
	return out
}

func satAdd(a, d int64) int64 {
	if a > 0 && d > 0 && a > math.MaxInt64-d {
		return math.MaxInt64
	}
	return a + d
}
