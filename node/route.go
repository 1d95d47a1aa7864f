package node

import (
	"context"
	"time"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/api"
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
		Forward:  nodeForwarder{n},
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

// nodeForwarder forwards through the node's forwarders (forward.go).
type nodeForwarder struct{ n *Node }

func (f nodeForwarder) Start(ctx context.Context, dest string, items []limit.Item, idx []int, ver uint64, forwarded bool) router.Pending {
	fw := f.n.forwarder(dest)
	c, err := fw.start(ctx, items, idx, ver, forwarded)
	return &pendingCall{f: fw, c: c, idx: idx, err: err}
}

// pendingCall is one destination's part of a check in flight.
type pendingCall struct {
	f   *forwarder
	c   *fwdCall
	idx []int
	err error // from start
}

func (p *pendingCall) Wait(ctx context.Context, res []limit.Result) error {
	if p.err != nil {
		return p.err
	}
	return p.f.wait(ctx, p.c, res, p.idx)
}

// checkObserver counts checks in ops (node/ops) and key caps in the
// node's metrics.
type checkObserver struct{ n *Node }

func (o checkObserver) Observe(items []limit.Item, res []limit.Result, d time.Duration) {
	o.n.ops.Observe(items, res, d)
}

func (o checkObserver) KeyCapped(rule string) { o.n.met.keyCapHits.WithLabelValues(rule).Inc() }
