// Package bug holds the switches that put back, one at a time, hand-off
// defects fixed since the first wave, so the simulator (and the test that
// first caught each) can show that it still finds them. Each switch site
// in replication reads `if bug.On(bug.Name) { old behaviour }` and is kept
// one line, obviously equivalent to the code before the fix; the list,
// what each puts back and which test catches it are in docs/design.md
// ("Re-inserted defects").
//
// In a normal build (off.go) On is a constant false the compiler inlines,
// so every switch site is dead code and a release binary carries none of
// the names (release_test.go builds cmd/weir and scans it). Only a build
// with the tag weirbugs (on.go) can turn one on: from the environment
// variable WEIR_SIM_BUG (one name or a comma list, read once; an unknown
// name panics with the known ones), or in-process with Set.
//
// Under the tag the set of switches on is process-wide (an atomic
// pointer): tests that Set it must not run in parallel with tests that
// need another set.
package bug

// The switches (docs/design.md, "Re-inserted defects").
const (
	// DoublePull: a reclaimed partition (its moved mark dropped) that the
	// ring also gave this node anew is pulled twice (fixed in d1f1bf0).
	DoublePull = "double-pull"
	// TwoPulls: a gained partition still pending is pulled again instead
	// of being left to the pull in flight (fixed in 31b2a03).
	TwoPulls = "two-pulls"
	// FlapLeftovers: provisional counters (settled from replica copies
	// within Settle, or a solo-ring flap's released leftovers) are handed
	// over as a holder's counters, not as copies (fixed in 31b2a03).
	FlapLeftovers = "flap-leftovers"
	// DroppedMovedMark: a partition this node owns whose moved mark is
	// dropped is decided here on no counters instead of taken back from
	// the puller or the best copies (fixed in 48e5edc).
	DroppedMovedMark = "dropped-moved-mark"
	// TakebackUnreachable: a take-back whose holder does not answer
	// settles the partition here without its counters (fixed in 2618420).
	TakebackUnreachable = "takeback-unreachable"
	// GainedMoved: a gained partition this node still marks moved to its
	// puller is pulled from the ring's old owner and replicas, not the
	// puller (fixed with the simulator's join-leave sequence).
	GainedMoved = "gained-moved"
	// RecutChange: a change queued before a ring change is shipped to the
	// replicas of the ring its flush reads, not of the one it was decided
	// on (Replicator.Seal does nothing; fixed with the simulator's
	// recut-delay sequence).
	RecutChange = "recut-change"
	// OffChainHolder: a holder a pull's asks to every member find, after
	// copies of the partition came, hands its counters over as a holder's
	// (they win over the copies) instead of as copies after them.
	OffChainHolder = "off-chain-holder"
	// KeepDropsCopies: a pull with Keep drops the copies it got for the
	// keys this node has no counter of (a holder that gave way passes its
	// counters as copies), instead of filling them in.
	KeepDropsCopies = "keep-drops-copies"
	// UnpulledLeftovers: a released partition nobody pulled within the
	// settle time is handed over as a holder's counters, not as copies.
	UnpulledLeftovers = "unpulled-leftovers"
)

// Env is the environment variable a weirbugs build reads the switches from.
const Env = "WEIR_SIM_BUG"

// Names lists every switch.
func Names() []string {
	return []string{DoublePull, TwoPulls, FlapLeftovers, DroppedMovedMark, TakebackUnreachable, GainedMoved, RecutChange, OffChainHolder, KeepDropsCopies, UnpulledLeftovers}
}
