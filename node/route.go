package node

import (
	"context"
	"time"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/api"
	"github.com/weirlimit/weir/node/forward"
	"github.com/weirlimit/weir/node/membership"
	"github.com/weirlimit/weir/node/router"
	"github.com/weirlimit/weir/ring"
)

// newRouter builds the check path (node/router) over the node's parts:
// the small adapters below stand in for the parts still on *Node.
func (n *Node) newRouter() (*router.Router, error) {
	cfg := router.Config{
		Self:     n.cfg.ID,
		Rules:    n.store,
		Engine:   n.engine,
		Handoff:  n.handoff,
		View:     n.routerView,
		Leaving:  n.cluster.Leaving,
		Forward:  tableForwarder{n.fwd},
		Now:      n.now,
		Observer: checkObserver{n},
		Tracer:   n.tracer,
		Logger:   n.log,
		Done:     n.ctx.Done(),
	}
	if n.region != nil {
		cfg.Region = n.region
	}
	return router.New(cfg)
}

// Check decides items (router.Router.Check).
func (n *Node) Check(ctx context.Context, items []limit.Item, out []limit.Result) error {
	return n.router.Check(ctx, items, out)
}

// GetLimits peeks every rule that applies to key, sorted by rule
// (router.Router.Limits).
func (n *Node) GetLimits(ctx context.Context, key string) ([]api.KeyLimit, error) {
	items, res, err := n.router.Limits(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make([]api.KeyLimit, len(items))
	for i := range items {
		out[i] = api.KeyLimit{Rule: items[i].Rule, Result: res[i]}
	}
	return out, nil
}

// rules returns the compiled view of the current rule set.
func (n *Node) rules() *router.RuleView { return n.router.Rules() }

// routerView is the current ring and cluster view as the router reads
// them (a nil ring before the first).
func (n *Node) routerView() (*ring.Ring, router.View) {
	if v := n.cluster.View(); v != nil {
		return v.Ring, v
	}
	return nil, nil
}

var _ router.View = (*membership.View)(nil)

// tableForwarder forwards through node/forward's table (router.Forwarder).
type tableForwarder struct{ t *forward.Table }

func (f tableForwarder) Start(ctx context.Context, dest string, items []limit.Item, idx []int, ver uint64, forwarded bool) router.Pending {
	return f.t.Start(ctx, dest, items, idx, ver, forwarded)
}

// errUnavailable is the node's "cannot answer now" (no ring yet, no
// view); it is limit.ErrUnavailable, so the edges answer Unavailable / 503.
var errUnavailable = router.ErrUnavailable

// checkObserver counts checks in ops (node/ops) and key caps in the
// node's metrics.
type checkObserver struct{ n *Node }

func (o checkObserver) Observe(items []limit.Item, res []limit.Result, d time.Duration) {
	o.n.ops.Observe(items, res, d)
}

func (o checkObserver) KeyCapped(rule string) { o.n.met.keyCapHits.WithLabelValues(rule).Inc() }
