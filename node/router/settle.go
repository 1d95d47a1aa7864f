package router

import (
	"context"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/limit"
)

// settleGroups enforces all-or-nothing across keys and nodes (the group
// contract, limit.Item.Group), in two steps: voidGroups reports the
// allowed items of a denied group voided and lists what they give back;
// refund checks those refund items (forwarded to their owners like any
// other). A shard already voids the items of a group it decides together,
// so this pass only acts across shards and nodes.
func (r *Router) settleGroups(ctx context.Context, items []limit.Item, res []limit.Result) {
	if refunds := voidGroups(items, res); len(refunds) > 0 {
		r.refund(ctx, refunds)
	}
}

// voidGroups: when any non-shadow item of a group is denied, the others
// that were allowed are reported voided (not allowed) in res, and the
// items that give their tokens back are returned: a permit is released by
// its id, anything else refunds its cost with an automatic lease's tokens.
func voidGroups(items []limit.Item, res []limit.Result) []limit.Item {
	var denied map[uint32]bool
	for i := range items {
		it := &items[i]
		if it.Group == 0 || res[i].Shadow || it.Refund {
			continue
		}
		if !res[i].Allowed {
			if denied == nil {
				denied = map[uint32]bool{}
			}
			denied[it.Group] = true
		}
	}
	if len(denied) == 0 {
		return nil
	}
	var refunds []limit.Item
	for i := range items {
		it := &items[i]
		if !denied[it.Group] || res[i].Shadow || it.Refund || !res[i].Allowed {
			continue
		}
		res[i].Allowed, res[i].Voided = false, true
		if p := res[i].Permit; !p.Zero() { // a permit is given back by its id, never refunded
			refunds = append(refunds, limit.Item{Key: it.Key, Rule: it.Rule, Release: &p})
			res[i].Permit, res[i].PermitExpires = bucket.PermitID{}, 0
			continue
		}
		if c := it.Cost + res[i].LeaseGranted; c > 0 { // with an automatic lease's tokens
			refunds = append(refunds, limit.Item{Key: it.Key, Rule: it.Rule, Cost: c, Refund: true})
		}
		res[i].LeaseGranted = 0
	}
	return refunds
}

// refund checks refund items as a caller's check (routed, not observed,
// not settled: refunds carry no group). A failure is logged: the tokens
// stay taken until their window refills them.
func (r *Router) refund(ctx context.Context, refunds []limit.Item) {
	if err := r.check(ctx, refunds, make([]limit.Result, len(refunds)), false); err != nil {
		r.cfg.Logger.Warn("group refund failed", "items", len(refunds), "err", err)
	}
}
