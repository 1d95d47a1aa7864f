package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/weirlimit/weir/ring"
)

// The ring a run's clusters are built on (Options.Ring). A zero Config is
// what production ships (ring.DefaultConfig: 2039 partitions, 100 virtual
// nodes, the balanced layout); LegacyRing is the shape the simulator ran
// before, which kept cases recorded on it name with a `ring` line.

// LegacyRing is the simulator's shape before it ran the production one:
// the legacy layout (20 virtual nodes, consistent) with 64 partitions, 256
// above 16 nodes. Cases whose schedules depend on where partitions land
// there replay on it (`ring 64 20 consistent`).
func LegacyRing(nodes int) ring.Config {
	c := ring.LegacyConfig()
	c.PartitionCount = 64
	if nodes > 16 {
		c.PartitionCount = 256
	}
	return c
}

// ringConfig is the ring every node of the run builds: opt.Ring with its
// zero fields as production's defaults.
func (opt Options) ringConfig() ring.Config {
	c, d := opt.Ring, ring.DefaultConfig()
	if c.PartitionCount == 0 {
		c.PartitionCount = d.PartitionCount
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = d.ReplicationFactor
	}
	if c.Load == 0 {
		c.Load = d.Load
	}
	if c.Replicas == 0 {
		c.Replicas = d.Replicas
	}
	if c.Layout == ring.LayoutDefault {
		c.Layout = d.Layout
	}
	return c
}

// RingShape names the ring opt runs on (ring.Config.Shape).
func RingShape(opt Options) string { return opt.ringConfig().Shape() }

// ParseRing reads a ring shape as a case's `ring` line or WEIR_SIM_RING
// give it: "PARTITIONS VNODES LAYOUT" (e.g. "64 20 consistent"), or
// "legacy" (LegacyRing of nodes).
func ParseRing(s string, nodes int) (ring.Config, error) {
	if s == "legacy" {
		return LegacyRing(nodes), nil
	}
	f := strings.Fields(s)
	if len(f) != 3 {
		return ring.Config{}, fmt.Errorf("%w: ring %q: want PARTITIONS VNODES LAYOUT or legacy", ErrSim, s)
	}
	c := ring.DefaultConfig()
	var err error
	if c.PartitionCount, err = strconv.Atoi(f[0]); err != nil {
		return ring.Config{}, fmt.Errorf("%w: ring %q: partitions: %v", ErrSim, s, err)
	}
	if c.ReplicationFactor, err = strconv.Atoi(f[1]); err != nil {
		return ring.Config{}, fmt.Errorf("%w: ring %q: vnodes: %v", ErrSim, s, err)
	}
	if c.Layout, err = ring.ParseLayout(f[2]); err != nil {
		return ring.Config{}, err
	}
	if c.PartitionCount < 1 || c.ReplicationFactor < 1 {
		return ring.Config{}, fmt.Errorf("%w: ring %q: partitions and vnodes must be >= 1", ErrSim, s)
	}
	return c, c.Validate()
}

// formatRing writes c as ParseRing reads it ("" for production's shape).
func formatRing(c ring.Config) string {
	if c == (ring.Config{}) {
		return ""
	}
	return fmt.Sprintf("%d %d %s", c.PartitionCount, c.ReplicationFactor, c.Layout)
}

// rings memoizes rings per shape and member set for every run of the
// process: every node of a run builds the same ring from the same
// members, and the runs of a search meet the same member sets again, so
// one is built and shared (rings are immutable, and a ring depends on its
// members and shape alone, so sharing leaves every trace as it was). At
// ringMemoMax rings it starts over, to bound its memory.
var rings struct {
	sync.Mutex
	memo map[string]*ring.Ring
}

const ringMemoMax = 2048

// memoRing is ring.New through the memo (Policy.NewRing).
func memoRing(members []string, cfg ring.Config) (*ring.Ring, error) {
	key := fmt.Sprintf("%d %d %s %v %d|", cfg.PartitionCount, cfg.ReplicationFactor, cfg.Layout, cfg.Load, cfg.Replicas) +
		strings.Join(slices.Sorted(slices.Values(members)), ",")
	rings.Lock()
	r, ok := rings.memo[key]
	rings.Unlock()
	if ok {
		return r, nil
	}
	r, err := ring.New(members, cfg)
	if err != nil {
		return nil, err
	}
	rings.Lock()
	if len(rings.memo) >= ringMemoMax || rings.memo == nil {
		rings.memo = map[string]*ring.Ring{}
	}
	rings.memo[key] = r
	rings.Unlock()
	return r, nil
}
