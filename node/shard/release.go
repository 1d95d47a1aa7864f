package shard

import (
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/weirlimit/weir/internal/sched"
)

// releaser hands memory the sweep freed back to the operating system.
// After a key flood idles out, the shards' tables shrink and the garbage
// collector reuses their space, but the Go runtime returns idle pages to
// the OS only gradually (its background scavenger works at about 1% of a
// CPU), so a node's RSS stays high for many minutes. Once the shards have
// let go of at least ReleaseBytes of tables, the releaser calls
// debug.FreeOSMemory (a full collection plus an immediate return of idle
// pages) on its own goroutine, at most once per ReleaseEvery.
type releaser struct {
	threshold int64
	every     time.Duration
	sched     sched.Sched
	release   func()
	pending   atomic.Int64  // bytes freed since the last release
	kick      chan struct{} // capacity 1: a release is wanted
	done      atomic.Uint64 // releases so far (Stats)
}

func newReleaser(cfg *Config) *releaser {
	return &releaser{
		threshold: cfg.ReleaseBytes,
		every:     cfg.ReleaseEvery,
		sched:     cfg.Sched,
		release:   debug.FreeOSMemory,
		kick:      make(chan struct{}, 1),
	}
}

// freed is called by a shard's sweep with the bytes of table it just let
// go; it never blocks.
func (r *releaser) freed(n int) {
	if r.pending.Add(int64(n)) < r.threshold {
		return
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run releases memory when kicked, rate-limited to one release per every.
func (r *releaser) run(quit <-chan struct{}) {
	var last time.Time
	for {
		select {
		case <-quit:
			return
		case <-r.kick:
		}
		if wait := r.every - r.sched.Now().Sub(last); !last.IsZero() && wait > 0 {
			t := r.sched.NewTimer(wait)
			select {
			case <-quit:
				t.Stop()
				return
			case <-t.C():
			}
		}
		r.pending.Store(0)
		r.release()
		r.done.Add(1)
		last = r.sched.Now()
	}
}
