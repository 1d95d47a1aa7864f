package bench

import (
	"context"
	"errors"
)

// Errors a target reports; wrapped with %w and detail.
var (
	// ErrUndecided: the limiter did not decide the check (unknown rule,
	// unavailable owner, an SDK fail-mode decision…). A denial is not an
	// error.
	ErrUndecided = errors.New("bench: check not decided")
	// ErrNoGroup: the scenario checks several rules per key and the target
	// cannot do that atomically.
	ErrNoGroup = errors.New("bench: target cannot check a group of rules")
)

// Target is one gateway's view of a rate limiter: what the bench drives.
type Target interface {
	// Check takes cost tokens from key under rule, if it may.
	Check(ctx context.Context, key, rule string, cost int64) (allowed bool, err error)
	// Close releases the gateway's connections.
	Close() error
}

// GroupChecker is implemented by targets that can check several rules on
// one key all-or-nothing (the multiwindow scenario).
type GroupChecker interface {
	CheckGroup(ctx context.Context, key string, rules []string, cost int64) (allowed bool, err error)
}

// Factory makes the Target of simulated gateway i (0 ≤ i < G). Each call
// must return an independent instance (its own connections and batching).
type Factory func(gateway int) (Target, error)

// LocalDecider is implemented by targets that decide some checks
// without the cluster (the SDK: leases, the blocked-until cache).
type LocalDecider interface {
	// Local returns the rule decisions served from a lease, the checks
	// denied by the blocked-until cache and the automatic leases granted,
	// so far.
	Local() (leaseHits, blockedHits, autoLeases uint64)
}

// Batcher is implemented by targets that coalesce checks into RPCs; Run
// reports the mean items per request over the measured run.
type Batcher interface {
	// Batching returns the requests sent and the items they carried so far.
	Batching() (rpcs, items uint64)
}

// LocalChecker is implemented by targets that can tell a check decided at
// the gateway, without a round trip (a lease, the blocked-until cache),
// from one the cluster decided: Run then reports their latencies apart.
type LocalChecker interface {
	CheckLocal(ctx context.Context, key, rule string, cost int64) (allowed, local bool, err error)
}
