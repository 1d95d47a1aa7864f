package ring

import (
	"fmt"
	"math"
)

// Defaults used by DefaultConfig and for zero fields of a Config.
const (
	DefaultPartitionCount    = 271
	DefaultReplicationFactor = 20
	DefaultLoad              = 1.25
	DefaultReplicas          = 2
)

// Sanity caps: a Config beyond them is a typo, not a cluster.
const (
	MaxPartitionCount    = 1 << 20
	MaxReplicationFactor = 1 << 12
	MaxReplicas          = 16
)

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
}

// DefaultConfig returns the configuration a cluster uses unless told
// otherwise.
func DefaultConfig() Config {
	return Config{
		PartitionCount:    DefaultPartitionCount,
		ReplicationFactor: DefaultReplicationFactor,
		Load:              DefaultLoad,
		Replicas:          DefaultReplicas,
	}
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
