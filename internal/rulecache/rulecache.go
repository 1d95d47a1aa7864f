// Package rulecache keeps one value compiled from the rule set, rebuilt
// when the rule set's version changes: the check path's compiled rules
// (node/router), the Envoy rate limit service's descriptor matcher
// (node/rls) and the forward-auth endpoint's request matcher
// (node/forwardauth) each hold one.
//
// Goroutines: none. Get is safe for concurrent use: readers load the
// current value without locking; a version change compiles once under a
// mutex and swaps the value atomically.
package rulecache

import (
	"sync"
	"sync/atomic"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// Cache holds the value compiled from one rule set version.
type Cache[T any] struct {
	compile func(set *rules.Set) T
	mu      sync.Mutex // serializes compiles
	cur     atomic.Pointer[entry[T]]
}

type entry[T any] struct {
	version uint64
	v       T
}

// New returns a cache that builds its value with compile, called with the
// rule set (nil: none yet, version 0) once per version.
func New[T any](compile func(set *rules.Set) T) *Cache[T] {
	return &Cache[T]{compile: compile}
}

// Get returns the value compiled from set, compiling it when set's version
// is not the one cached (nil set: version 0).
func (c *Cache[T]) Get(set *rules.Set) T {
	var ver uint64
	if set != nil {
		ver = set.Version
	}
	if e := c.cur.Load(); e != nil && e.version == ver {
		return e.v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.cur.Load(); e != nil && e.version == ver {
		return e.v
	}
	e := &entry[T]{version: ver, v: c.compile(set)}
	c.cur.Store(e)
	return e.v
}
