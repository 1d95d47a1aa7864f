package shard

import (
	"cmp"
	"fmt"
	"runtime"
	"time"

	"github.com/weirlimit/weir/internal/sched"
	"github.com/weirlimit/weir/replication"
)

// Config configures an Engine. Zero fields take the DefaultConfig value in
// New; Validate rejects negative or otherwise unusable values.
type Config struct {
	// Shards is the number of shards (each with a lock and a goroutine
	// for its sweeps and left-over queue). Partition p belongs to
	// shard p % Shards. Default GOMAXPROCS (a test that depends on how
	// items split over shards sets it).
	Shards int
	// QueueLen is the capacity of each shard's queue of requests waiting
	// for its lock. Default 1024.
	QueueLen int
	// MaxBatch is how many queued requests a shard drains and decides in
	// one go (one clock read, one OnChange call). Default 256.
	MaxBatch int
	// Now returns the owner's clock in unix nanoseconds. It is the only
	// place the engine reads a clock. Default Sched's clock.
	Now func() int64
	// Sched starts the shard and releaser goroutines and runs their
	// tickers and timers. Default production (sched.Real).
	Sched sched.Sched
	// Inline makes an engine that starts no goroutine: each call is
	// decided on the caller's goroutine (a shard's work one call at a
	// time, under a lock), the sweep runs when the caller calls Tick, and
	// freed memory is left to the Go runtime. A simulation drives it
	// step by step.
	Inline bool
	// OnChange, if not nil, is called under a shard's lock (on the
	// goroutine that decided the batch) after each batch with the states that batch changed (decisions, refunds,
	// imports), and after each sweep step with the fresh states
	// (replication.State.Fresh) of the counters that idled out. It must not
	// block. The slice and every Log in it are reused by the shard after
	// the call returns: copy what you keep.
	OnChange func(states []replication.State)
	// SnapshotMinIdle is how far off a counter's idle deadline must be for
	// it to be in a Snapshot (a durable counter). Default 1h.
	SnapshotMinIdle time.Duration
	// SweepEvery is how often each shard runs one incremental idle-expiry
	// step. Default 1s.
	SweepEvery time.Duration
	// SweepBudget is about how many counter slots one sweep step examines
	// (plus the sliding logs of each partition it enters). Default 16384.
	SweepBudget int
	// ImportIdle is how long an imported counter that is never decided
	// again is kept when its state carries no idle deadline
	// (replication.State.Idle 0, an older peer): the engine does not know
	// its limit. Default 24h.
	ImportIdle time.Duration
	// SweepPass bounds how long a full sweep pass takes: each shard runs
	// as many extra steps (between batches, one step at a time) as it takes
	// to examine every slot of its tables about once per SweepPass, so a
	// counter is dropped within about 2*(SweepPass + SweepEvery) of its
	// idle deadline (the walk may just have passed it), however many
	// counters there are. Default 5s.
	SweepPass time.Duration
	// ReleaseBytes is how many bytes of tables the sweep must have freed
	// before the engine returns idle memory to the operating system
	// (debug.FreeOSMemory). Default 64 MiB.
	ReleaseBytes int64
	// MaxKeys is the default cap on the live counters of one rule
	// (Item.Cap) in this engine, for items whose Cap.MaxKeys is 0. Default
	// 1,000,000.
	MaxKeys int64
	// ReleaseEvery is the least time between two such returns. Default 10s.
	ReleaseEvery time.Duration
	// AutoLeaseRate is the demand, in tokens taken per second, at which a
	// counter of a rule with lease: auto becomes hot (when AutoLeaseGateways
	// gateways ask for it); it cools below half that. Default 100.
	AutoLeaseRate int64
	// AutoLeaseGateways is how many distinct gateways must ask for a key
	// within about one AutoLeaseHorizon for it to become hot. Default 2.
	AutoLeaseGateways int
	// AutoLeaseHorizon is the time constant of a key's rate estimate.
	// Default 1s.
	AutoLeaseHorizon time.Duration
	// AutoLeaseKeys bounds the keys each shard keeps a rate estimate for.
	// Default 4096.
	AutoLeaseKeys int
}

// DefaultConfig returns the defaults described on Config.
func DefaultConfig() Config {
	return Config{
		Shards:      runtime.GOMAXPROCS(0),
		QueueLen:    1024,
		MaxBatch:    256,
		Sched:       sched.Real{},
		SweepEvery:  time.Second,
		SweepBudget: 16384,
		ImportIdle:  24 * time.Hour,
		SweepPass:   5 * time.Second,

		SnapshotMinIdle: time.Hour,

		MaxKeys:      1_000_000,
		ReleaseBytes: 64 << 20,
		ReleaseEvery: 10 * time.Second,

		AutoLeaseRate:     100,
		AutoLeaseGateways: 2,
		AutoLeaseHorizon:  time.Second,
		AutoLeaseKeys:     4096,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Shards = cmp.Or(c.Shards, d.Shards)
	c.QueueLen = cmp.Or(c.QueueLen, d.QueueLen)
	c.MaxBatch = cmp.Or(c.MaxBatch, d.MaxBatch)
	c.Sched = sched.Or(c.Sched)
	if c.Now == nil {
		clock := c.Sched
		c.Now = func() int64 { return clock.Now().UnixNano() }
	}
	c.SweepEvery = cmp.Or(c.SweepEvery, d.SweepEvery)
	c.SnapshotMinIdle = cmp.Or(c.SnapshotMinIdle, d.SnapshotMinIdle)
	c.SweepBudget = cmp.Or(c.SweepBudget, d.SweepBudget)
	c.ImportIdle = cmp.Or(c.ImportIdle, d.ImportIdle)
	c.SweepPass = cmp.Or(c.SweepPass, d.SweepPass)
	c.MaxKeys = cmp.Or(c.MaxKeys, d.MaxKeys)
	c.ReleaseBytes = cmp.Or(c.ReleaseBytes, d.ReleaseBytes)
	c.ReleaseEvery = cmp.Or(c.ReleaseEvery, d.ReleaseEvery)
	c.AutoLeaseRate = cmp.Or(c.AutoLeaseRate, d.AutoLeaseRate)
	c.AutoLeaseGateways = cmp.Or(c.AutoLeaseGateways, d.AutoLeaseGateways)
	c.AutoLeaseHorizon = cmp.Or(c.AutoLeaseHorizon, d.AutoLeaseHorizon)
	c.AutoLeaseKeys = cmp.Or(c.AutoLeaseKeys, d.AutoLeaseKeys)
	return c
}

// Validate reports the first unusable field, wrapped in ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.Shards < 1:
		return fmt.Errorf("%w: Shards %d < 1", ErrInvalidConfig, c.Shards)
	case c.QueueLen < 1:
		return fmt.Errorf("%w: QueueLen %d < 1", ErrInvalidConfig, c.QueueLen)
	case c.MaxBatch < 1:
		return fmt.Errorf("%w: MaxBatch %d < 1", ErrInvalidConfig, c.MaxBatch)
	case c.SnapshotMinIdle <= 0:
		return fmt.Errorf("%w: SnapshotMinIdle %v <= 0", ErrInvalidConfig, c.SnapshotMinIdle)
	case c.SweepEvery <= 0:
		return fmt.Errorf("%w: SweepEvery %v <= 0", ErrInvalidConfig, c.SweepEvery)
	case c.SweepBudget < 1:
		return fmt.Errorf("%w: SweepBudget %d < 1", ErrInvalidConfig, c.SweepBudget)
	case c.ImportIdle <= 0:
		return fmt.Errorf("%w: ImportIdle %v <= 0", ErrInvalidConfig, c.ImportIdle)
	case c.SweepPass <= 0:
		return fmt.Errorf("%w: SweepPass %v <= 0", ErrInvalidConfig, c.SweepPass)
	case c.MaxKeys < 0:
		return fmt.Errorf("%w: MaxKeys %d < 0", ErrInvalidConfig, c.MaxKeys)
	case c.ReleaseBytes < 0:
		return fmt.Errorf("%w: ReleaseBytes %d < 0", ErrInvalidConfig, c.ReleaseBytes)
	case c.ReleaseEvery <= 0:
		return fmt.Errorf("%w: ReleaseEvery %v <= 0", ErrInvalidConfig, c.ReleaseEvery)
	case c.AutoLeaseRate < 1:
		return fmt.Errorf("%w: AutoLeaseRate %d < 1", ErrInvalidConfig, c.AutoLeaseRate)
	case c.AutoLeaseGateways < 1 || c.AutoLeaseGateways > 64:
		return fmt.Errorf("%w: AutoLeaseGateways %d not in [1, 64]", ErrInvalidConfig, c.AutoLeaseGateways)
	case c.AutoLeaseHorizon <= 0:
		return fmt.Errorf("%w: AutoLeaseHorizon %v <= 0", ErrInvalidConfig, c.AutoLeaseHorizon)
	case c.AutoLeaseKeys < 1:
		return fmt.Errorf("%w: AutoLeaseKeys %d < 1", ErrInvalidConfig, c.AutoLeaseKeys)
	}
	return nil
}
