// Package sched is the one seam through which the hand-off, the
// replicator and the shard engine reach anything nondeterministic:
// starting concurrent work (Go), the clock (Now), timers and tickers,
// deadlines on that clock (WithTimeout, instead of context.WithTimeout on
// the wall clock), and randomness (Uint64).
//
// Real is what production passes: plain goroutines, package time and
// math/rand/v2's global generator, so the code that ships is the code a
// test drives. schedtest.Sim is the deterministic one: a clock that moves
// only when the test advances it (firing timers and tickers in deadline
// order), work that Go queues for the test to run (or runs inline), and
// randomness from a seed.
//
// The package owns no state: Real is an empty value, and every Sim is its
// own world, so several nodes run in one process. test/guard_test.go fails
// when code on the guarded paths reaches time, goroutines, wall-clock
// deadlines or global randomness other than through a Sched.
//
// It imports the standard library only (no grpc, memberlist or raft).
package sched
