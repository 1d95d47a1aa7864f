package clusterview

import (
	"fmt"
	"sync/atomic"

	"github.com/weirlimit/weir/ring"
)

// ShapeGuard keeps members of another ring shape out: every member of a
// cluster must hash keys into the same partitions and place them the same
// way, or two members would each decide for a key (and a hand-off would
// move counters to a member that looks for them elsewhere). Members gossip
// their ring.Config.Shape; gossip calls Check for every member it hears of
// and drops one Check refuses. Safe for concurrent use.
type ShapeGuard struct {
	own     string
	refused atomic.Pointer[ShapeError]
}

// NewShapeGuard guards the shape of cfg.
func NewShapeGuard(cfg ring.Config) *ShapeGuard { return &ShapeGuard{own: cfg.Shape()} }

// Own is the shape this node gossips.
func (g *ShapeGuard) Own() string { return g.own }

// Check refuses member id gossiping shape when it is not this node's. An
// empty shape is a binary from before shapes were gossiped, whose shape
// was ring.LegacyConfig's.
func (g *ShapeGuard) Check(id, shape string) error {
	if shape == "" {
		shape = ring.LegacyConfig().Shape()
	}
	if shape == g.own {
		return nil
	}
	err := &ShapeError{Member: id, Own: g.own, Theirs: shape}
	g.refused.CompareAndSwap(nil, err)
	return err
}

// Refused is the first member Check refused, or nil.
func (g *ShapeGuard) Refused() error {
	if err := g.refused.Load(); err != nil {
		return err
	}
	return nil
}

// ShapeError is a member refused for its ring shape.
type ShapeError struct{ Member, Own, Theirs string }

func (e *ShapeError) Error() string {
	return fmt.Sprintf("ring shape differs: this node has %q, member %s has %q; every member of a cluster must have the same shape "+
		"(weir node --partitions, --vnodes, --ring-layout; a cluster made before the 2039-partition default has 271, 20, consistent; see docs/operations.md)",
		e.Own, e.Member, e.Theirs)
}
