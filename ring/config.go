package ring

import (
	"fmt"
	"math"
)

// Defaults used by DefaultConfig and for zero fields of a Config.
// The default shape (2039 partitions, 100 virtual nodes per member,
// LayoutBalanced) is for new clusters: every member owns within ±25% of the
// mean partitions (see balance_test.go).
const (
	DefaultPartitionCount    = 2039
	DefaultReplicationFactor = 100
	DefaultLoad              = 1.25
	DefaultReplicas          = 2
)

// The shape of clusters made before the default changed (and of binaries
// that gossip no shape): LegacyConfig.
const (
	LegacyPartitionCount    = 271
	LegacyReplicationFactor = 20
)

// Layout is how a ring places members and partitions beyond the shape's
// numbers.
type Layout uint8

const (
	// LayoutDefault is LayoutBalanced.
	LayoutDefault Layout = iota
	// LayoutConsistent is consistent v0.10.0's, as it is: virtual nodes
	// named the ID followed by the index ("n1" point 10 and "n11" point 0
	// are both "n110", so members whose IDs end in digits share points and
	// the later member wins them), and owners as consistent assigns them.
	// The legacy shape uses it.
	LayoutConsistent
	// LayoutBalanced puts "#" between the ID and the index, so no two
	// members share a point, and then lifts every member to at least
	// ceil(PartitionCount/members * (2-Load)) partitions (-25% of the mean
	// at Load 1.25) by taking partitions from the most-loaded members, as
	// Load already caps them at +25%.
	LayoutBalanced
)

// Sanity caps: a Config beyond them is a typo, not a cluster.
const (
	MaxPartitionCount    = 1 << 20
	MaxReplicationFactor = 1 << 12
	MaxReplicas          = 16
)

// String is the layout's name: "balanced" (LayoutDefault too) or
// "consistent".
func (l Layout) String() string {
	switch l {
	case LayoutConsistent:
		return "consistent"
	case LayoutBalanced, LayoutDefault:
		return "balanced"
	}
	return fmt.Sprintf("Layout(%d)", uint8(l))
}

// ParseLayout is the layout named s ("balanced" or "consistent").
func ParseLayout(s string) (Layout, error) {
	switch s {
	case "balanced":
		return LayoutBalanced, nil
	case "consistent":
		return LayoutConsistent, nil
	}
	return LayoutDefault, fmt.Errorf("%w: ring layout %q: want balanced or consistent", ErrInvalidConfig, s)
}

// Config shapes a Ring. Every node and every gateway of one cluster must use
// the same Config, or they will disagree about owners. A zero field means
// its default; Ring.Config reports the values in effect.
type Config struct {
	// PartitionCount is the number of partitions keys hash into. It is
	// fixed for the life of a cluster: changing it moves almost every key.
	PartitionCount int
	// ReplicationFactor is the number of virtual nodes per member on the
	// hash circle (consistent's ReplicationFactor; not the data replicas).
	ReplicationFactor int
	// Load bounds the partitions a member may own to
	// ceil(floor(PartitionCount/members) * Load). Must be >= 1.
	Load float64
	// Replicas is R: each partition lives on its owner plus R-1 replicas.
	Replicas int
	// Layout is the placement (LayoutDefault: LayoutBalanced).
	Layout Layout
}

// DefaultConfig returns the configuration a cluster uses unless told
// otherwise.
func DefaultConfig() Config {
	return Config{
		PartitionCount:    DefaultPartitionCount,
		ReplicationFactor: DefaultReplicationFactor,
		Load:              DefaultLoad,
		Replicas:          DefaultReplicas,
		Layout:            LayoutBalanced,
	}
}

// LegacyConfig is the shape of clusters made before DefaultConfig changed
// (271 partitions, 20 virtual nodes named as consistent names them): a
// running cluster keeps it, since changing the shape moves almost every
// key.
func LegacyConfig() Config {
	c := DefaultConfig()
	c.PartitionCount, c.ReplicationFactor, c.Layout = LegacyPartitionCount, LegacyReplicationFactor, LayoutConsistent
	return c
}

// Shape names c (defaults filled in) in one line, e.g. "2039 partitions,
// 100 vnodes, balanced layout, load 1.25, 2 replicas". Every member of a cluster must
// have the same shape; members gossip it and refuse one that differs.
func (c Config) Shape() string {
	c = c.withDefaults()
	return fmt.Sprintf("%d partitions, %d vnodes, %s layout, load %v, %d replicas", c.PartitionCount, c.ReplicationFactor, c.Layout, c.Load, c.Replicas)
}

// withDefaults fills zero fields with their defaults.
func (c Config) withDefaults() Config {
	if c.PartitionCount == 0 {
		c.PartitionCount = DefaultPartitionCount
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	if c.Load == 0 {
		c.Load = DefaultLoad
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.Layout == LayoutDefault {
		c.Layout = LayoutBalanced
	}
	return c
}

// Validate reports whether c (with zero fields taken as defaults) is usable.
// Errors wrap ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.PartitionCount < 1 || c.PartitionCount > MaxPartitionCount:
		return fmt.Errorf("%w: PartitionCount %d not in [1, %d]", ErrInvalidConfig, c.PartitionCount, MaxPartitionCount)
	case c.ReplicationFactor < 1 || c.ReplicationFactor > MaxReplicationFactor:
		return fmt.Errorf("%w: ReplicationFactor %d not in [1, %d]", ErrInvalidConfig, c.ReplicationFactor, MaxReplicationFactor)
	case math.IsNaN(c.Load) || math.IsInf(c.Load, 0) || c.Load < 1:
		return fmt.Errorf("%w: Load %v must be a finite number >= 1", ErrInvalidConfig, c.Load)
	case c.Replicas < 1 || c.Replicas > MaxReplicas:
		return fmt.Errorf("%w: Replicas %d not in [1, %d]", ErrInvalidConfig, c.Replicas, MaxReplicas)
	case c.Layout > LayoutBalanced:
		return fmt.Errorf("%w: Layout %d not in [0, %d]", ErrInvalidConfig, c.Layout, LayoutBalanced)
	}
	return nil
}

// MaxLoad is the most partitions one member may own in a ring of n members
// under c: consistent's bound, ceil(floor(PartitionCount/n) * Load). It is 0
// for n < 1.
func (c Config) MaxLoad(n int) int {
	if n < 1 {
		return 0
	}
	c = c.withDefaults()
	return int(math.Ceil(float64(c.PartitionCount/n) * c.Load))
}
