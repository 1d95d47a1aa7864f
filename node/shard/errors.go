package shard

import "errors"

var (
	// ErrClosed is returned by every call made after Close, and by calls
	// still waiting when Close stops the shards.
	ErrClosed = errors.New("shard: engine closed")
	// ErrNotStarted is returned by calls made before Start.
	ErrNotStarted = errors.New("shard: engine not started")
	// ErrInvalidConfig wraps every Config.Validate failure.
	ErrInvalidConfig = errors.New("shard: invalid config")
	// ErrInvalidItem is returned by Check for a malformed call (negative
	// cost, len(out) != len(items)); no counter is touched.
	ErrInvalidItem = errors.New("shard: invalid item")
)
