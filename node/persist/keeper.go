package persist

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/weirlimit/weir/internal/sched"
	"github.com/weirlimit/weir/replication"
)

// Counters are the node's shards as the keeper needs them: their durable
// counters (taken between batches) and an import of a solo node's.
type Counters interface {
	Snapshot(ctx context.Context) ([]replication.State, error)
	Import(ctx context.Context, states []replication.State) error
}

// Copies is the node's replica store: loaded copies go in as copies from
// this node, durable ones come out.
type Copies interface {
	Apply(from string, states []replication.State) error
	Select(keep func(*replication.State) bool) []replication.State
}

// Ring is the published ring as the keeper reads it.
type Ring interface {
	Members() []string
	AppendPartitionReplicas(dst []string, p uint32) []string
}

// KeeperConfig is what a Keeper is built from.
type KeeperConfig struct {
	ID      string
	DataDir string
	// Solo: the node joins nobody (no Config.Join), so counters it wrote
	// as the ring's only member are its own to import.
	Solo        bool
	Partitions  uint32
	Interval    time.Duration // the writer's (--persist-interval)
	RestoreWait time.Duration // the longest the first ring waits for the members of a loaded file
	MinIdle     time.Duration // a counter is durable when its idle deadline is this far off (the shards' SnapshotMinIdle)
	Now         func() int64  // the node's clock
	Sched       sched.Sched
	Logger      *slog.Logger

	Counters Counters
	Copies   Copies
	Ring     func() Ring // the published ring; nil before the first
	Leaving  func() bool
}

// Keeper is a node's part in keeping long-lived counters across a
// full-cluster stop (docs/design.md, Durable counters): it loads the data
// dir's file at start, holds the first ring back until the members it was
// written with are back (Restoring), and writes the node's durable
// counters every Interval (Run) and at leave (Write).
type Keeper struct {
	cfg    KeeperConfig
	writer *Writer
	// solo: counters written by a node that was the ring's only member,
	// imported into the shards by Start (nobody else can hold them).
	solo []replication.State
	// members the loaded copies were written with (this node among them),
	// nil when nothing was loaded; until: when to stop waiting for them;
	// waiting: the wait was logged. Restoring's (the cluster loop's) only.
	members []string
	until   int64
	waiting bool
	// ring: the members written with the counters: the ring's, this node
	// included, as of the last write before this node began to leave (a
	// leaving node is out of its own ring). collect's only.
	ring []string
}

// NewKeeper loads the data dir's counters file into the replica store as
// copies (or keeps a solo node's for Start) and builds the writer. A file
// that cannot be read (damaged, truncated, another version) is reported
// and ignored: the node starts as it would without one.
func NewKeeper(cfg KeeperConfig) *Keeper {
	path := filepath.Join(cfg.DataDir, File)
	k := &Keeper{cfg: cfg}
	k.writer = &Writer{Path: path, Interval: cfg.Interval, Collect: k.collect, Sched: cfg.Sched, Logger: cfg.Logger}
	snap, err := ReadFile(path)
	if err != nil {
		cfg.Logger.Error("durable counters file ignored: it cannot be read, so this node starts without the counters it held", "path", path, "err", err)
		return k
	}
	now := cfg.Now()
	states := slices.DeleteFunc(snap.States, func(st replication.State) bool { return st.Idle <= now || st.Partition >= cfg.Partitions })
	if len(states) == 0 {
		return k
	}
	written := time.Unix(0, snap.WrittenAt).UTC()
	if cfg.Solo && !slices.ContainsFunc(snap.Members, func(id string) bool { return id != cfg.ID }) {
		k.solo = states
		cfg.Logger.Info("durable counters loaded", "counters", len(states), "written", written)
		return k
	}
	if err := cfg.Copies.Apply(cfg.ID, states); err != nil {
		cfg.Logger.Warn("durable counters loaded in part", "err", err)
	}
	k.members, k.until = snap.Members, now+int64(cfg.RestoreWait)
	cfg.Logger.Info("durable counters loaded as replica copies: the hand-off settles them once the members they were written with are back",
		"counters", len(states), "written", written, "members", snap.Members)
	return k
}

// Start imports a solo node's counters into the shards (before the node
// serves checks).
func (k *Keeper) Start(ctx context.Context) {
	if len(k.solo) == 0 {
		return
	}
	ctx, cancel := sched.Or(k.cfg.Sched).WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := k.cfg.Counters.Import(ctx, k.solo); err != nil {
		k.cfg.Logger.Warn("durable counters not imported", "err", err)
	}
	k.solo = nil
}

// Run writes the durable counters every Interval until ctx ends.
func (k *Keeper) Run(ctx context.Context) error { return k.writer.Run(ctx) }

// Write writes the durable counters now (at the end of a leave).
func (k *Keeper) Write() {
	ctx, cancel := sched.Or(k.cfg.Sched).WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.writer.Write(ctx); err != nil {
		k.cfg.Logger.Warn("durable counters not written at leave", "err", err)
	}
}

// Restoring reports whether the first ring must wait for members: this
// node loaded copies written with members that are not all live, and
// RestoreWait has not run out (clusterview.Input.Restoring). haveRing: a
// ring was published already (then nothing waits). Called by the cluster
// loop only.
func (k *Keeper) Restoring(live func(id string) bool, haveRing bool) bool {
	if k.members == nil || haveRing {
		return false
	}
	var missing []string
	for _, id := range k.members {
		if !live(id) {
			missing = append(missing, id)
		}
	}
	switch {
	case len(missing) == 0:
		k.members = nil
		return false
	case k.cfg.Now() >= k.until:
		k.cfg.Logger.Warn("restore: the members the durable counters were written with are not all back; forming a ring without them", "missing", missing, "waited", k.cfg.RestoreWait)
		k.members = nil
		return false
	}
	if !k.waiting {
		k.waiting = true
		k.cfg.Logger.Info("restore: waiting for the members the durable counters were written with (checks are answered unavailable meanwhile)", "missing", missing, "at most", k.cfg.RestoreWait)
	}
	return true
}

// collect gathers what the writer writes: the shards' durable counters
// (each shard's part taken between its batches) and this node's durable
// replica copies, with the ring's members. Before the node has a ring
// there is nothing to write (the file on disk stays as it is). The writer
// calls it one write at a time.
func (k *Keeper) collect(ctx context.Context) (Snapshot, error) {
	r := k.cfg.Ring()
	if r == nil {
		return Snapshot{}, ErrNotReady
	}
	states, err := k.cfg.Counters.Snapshot(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	now := k.cfg.Now()
	var buf []string
	states = append(states, k.cfg.Copies.Select(func(st *replication.State) bool {
		if st.Volatile || st.Idle-now < int64(k.cfg.MinIdle) || st.Fresh() {
			return false
		}
		// Only copies this node is placed to hold: not the leftovers of
		// partitions it no longer replicates (kept a while for a puller),
		// which would come back stale after the next full stop.
		buf = r.AppendPartitionReplicas(buf[:0], st.Partition)
		return slices.Contains(buf, k.cfg.ID)
	})...)
	if !k.cfg.Leaving() || k.ring == nil {
		k.ring = r.Members()
		if !slices.Contains(k.ring, k.cfg.ID) {
			k.ring = append(k.ring, k.cfg.ID)
		}
		slices.Sort(k.ring)
	}
	return Snapshot{WrittenAt: now, Members: k.ring, States: states}, nil
}
