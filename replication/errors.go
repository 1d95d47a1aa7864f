package replication

import "errors"

var (
	// ErrInvalidConfig is wrapped by Config.Validate and NewReplicator when a
	// Config field is out of range.
	ErrInvalidConfig = errors.New("invalid replication config")
	// ErrRunning is returned by Run when another Run of the same Replicator
	// has not returned yet.
	ErrRunning = errors.New("replication already running")
	// ErrNilDependency is returned by NewReplicator for a nil Transport or
	// Placement.
	ErrNilDependency = errors.New("replication: nil dependency")
	// ErrQueueFull is returned by Resync when the states would not fit in
	// the queue of changes waiting for the next flush; retry after a flush.
	ErrQueueFull = errors.New("replication queue full")
	// ErrNoStream is wrapped by Streams.OpenStream when the peer lacks
	// streams: the Replicator then ships to it with Transport.Replicate.
	ErrNoStream = errors.New("peer has no replication stream")
)
