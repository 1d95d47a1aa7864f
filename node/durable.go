package node

import (
	"context"
	"path/filepath"
	"slices"
	"time"

	"github.com/weirlimit/weir/node/persist"
	"github.com/weirlimit/weir/replication"
)

// durableMinIdle is how far off a counter's idle deadline must be for it
// to be written to the data dir (shard.Config.SnapshotMinIdle's default).
const durableMinIdle = time.Hour

// durable is this node's part in keeping long-lived counters across a
// full-cluster stop (docs/design.md, Durable counters): the writer, and
// what was loaded at start. Set up in New; the restore fields are read
// and written by the cluster loop only, after New.
type durable struct {
	writer *persist.Writer
	// solo: counters written by a node that was the ring's only member,
	// imported into the engine at Start (nobody else can hold them).
	solo []replication.State
	// members the loaded copies were written with (this node among
	// them), nil when nothing was loaded; until: when to stop waiting for
	// them (RestoreWait); waiting: the wait was logged.
	members []string
	until   int64
	waiting bool

	// ring: the members written with the counters: the ring's, this node
	// included, as of the last write before this node began to leave
	// (a leaving node is out of its own ring). collectDurable's only.
	ring []string
}

// setupDurable loads the data dir's counters file and builds the writer.
// A file that cannot be read (damaged, truncated, another version) is
// reported and ignored: the node starts as it would without one.
func (n *Node) setupDurable() {
	path := filepath.Join(n.cfg.DataDir, persist.File)
	n.durable = &durable{writer: &persist.Writer{Path: path, Interval: n.cfg.PersistInterval,
		Collect: n.collectDurable, Sched: n.cfg.Sched, Logger: n.log.With("component", "persist")}}
	snap, err := persist.ReadFile(path)
	if err != nil {
		n.log.Error("durable counters file ignored: it cannot be read, so this node starts without the counters it held", "path", path, "err", err)
		return
	}
	now := n.now()
	parts := uint32(n.cfg.Ring.PartitionCount)
	states := slices.DeleteFunc(snap.States, func(st replication.State) bool { return st.Idle <= now || st.Partition >= parts })
	if len(states) == 0 {
		return
	}
	written := time.Unix(0, snap.WrittenAt).UTC()
	if len(n.cfg.Join) == 0 && !slices.ContainsFunc(snap.Members, func(id string) bool { return id != n.cfg.ID }) {
		n.durable.solo = states
		n.log.Info("durable counters loaded", "counters", len(states), "written", written)
		return
	}
	if err := n.replicas.Apply(n.cfg.ID, states); err != nil {
		n.log.Warn("durable counters loaded in part", "err", err)
	}
	n.durable.members, n.durable.until = snap.Members, now+int64(n.cfg.RestoreWait)
	n.log.Info("durable counters loaded as replica copies: the hand-off settles them once the members they were written with are back",
		"counters", len(states), "written", written, "members", snap.Members)
}

// startDurable imports a solo node's counters and starts the writer
// (Start).
func (n *Node) startDurable() {
	if d := n.durable; len(d.solo) > 0 {
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		if err := n.engine.Import(ctx, d.solo); err != nil {
			n.log.Warn("durable counters not imported", "err", err)
		}
		cancel()
		d.solo = nil
	}
	n.goFunc(func() { _ = n.durable.writer.Run(n.ctx) })
}

// restoring reports whether the first ring must wait for members: this
// node loaded copies written with members that are not all back, and
// RestoreWait has not run out (clusterview.Input.Restoring). Called by the
// cluster loop only.
func (n *Node) restoring(live map[string]member) bool {
	d := n.durable
	if d.members == nil || n.view.Load() != nil {
		return false
	}
	var missing []string
	for _, id := range d.members {
		if _, ok := live[id]; !ok {
			missing = append(missing, id)
		}
	}
	switch {
	case len(missing) == 0:
		d.members = nil
		return false
	case n.now() >= d.until:
		n.log.Warn("restore: the members the durable counters were written with are not all back; forming a ring without them", "missing", missing, "waited", n.cfg.RestoreWait)
		d.members = nil
		return false
	}
	if !d.waiting {
		d.waiting = true
		n.log.Info("restore: waiting for the members the durable counters were written with (checks are answered unavailable meanwhile)", "missing", missing, "at most", n.cfg.RestoreWait)
	}
	return true
}

// collectDurable gathers what the writer writes: the shards' durable
// counters (each shard's part taken between its batches) and this node's
// durable replica copies, with the ring's members. Before the node has a
// ring there is nothing to write (the file on disk stays as it is). The
// writer calls it one write at a time (its goroutine's, a leave's).
func (n *Node) collectDurable(ctx context.Context) (persist.Snapshot, error) {
	v := n.view.Load()
	if v == nil {
		return persist.Snapshot{}, persist.ErrNotReady
	}
	states, err := n.engine.Snapshot(ctx)
	if err != nil {
		return persist.Snapshot{}, err
	}
	now := n.now()
	var buf []string
	states = append(states, n.replicas.Select(func(st *replication.State) bool {
		if st.Volatile || st.Idle-now < int64(durableMinIdle) || st.Fresh() {
			return false
		}
		// Only copies this node is placed to hold: not the leftovers of
		// partitions it no longer replicates (kept a while for a puller),
		// which would come back stale after the next full stop.
		buf = v.ring.AppendPartitionReplicas(buf[:0], st.Partition)
		return slices.Contains(buf, n.cfg.ID)
	})...)
	d := n.durable
	if !n.leaving.Load() || d.ring == nil {
		d.ring = v.ring.Members()
		if !slices.Contains(d.ring, n.cfg.ID) {
			d.ring = append(d.ring, n.cfg.ID)
		}
		slices.Sort(d.ring)
	}
	return persist.Snapshot{WrittenAt: now, Members: d.ring, States: states}, nil
}

// writeDurable writes the durable counters now (at the end of a leave).
func (n *Node) writeDurable() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.durable.writer.Write(ctx); err != nil {
		n.log.Warn("durable counters not written at leave", "err", err)
	}
}
