package node

import (
	"context"
	"slices"
	"strings"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/api"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// GetLimits peeks (cost 0) every rule that applies to key, sorted by rule:
// the rules whose key type the key is of ("apikey:ak_1" → key apikey;
// "header:X-Tenant:t1" → key header:X-Tenant; "global:global" → key
// global). A key of a type no rule limits gets an empty list.
func (n *Node) GetLimits(ctx context.Context, key string) ([]api.KeyLimit, error) {
	rv := n.rules()
	var items []limit.Item
	for id, cr := range rv.rules {
		if appliesTo(&cr.rule, key) {
			items = append(items, limit.Item{Key: key, Rule: id})
		}
	}
	res := make([]limit.Result, len(items))
	if len(items) > 0 {
		if err := n.check(ctx, items, res, false); err != nil {
			return nil, err
		}
	}
	out := make([]api.KeyLimit, len(items))
	for i := range items {
		out[i] = api.KeyLimit{Rule: items[i].Rule, Result: res[i]}
	}
	slices.SortFunc(out, func(a, b api.KeyLimit) int { return strings.Compare(a.Rule, b.Rule) })
	return out, nil
}

// appliesTo reports whether r limits keys of key's type: key is
// "<r.Key>:<value>" (the gateway SDK builds keys so; a global rule's key
// is "global:global").
func appliesTo(r *rules.Rule, key string) bool {
	return len(key) > len(r.Key) && key[len(r.Key)] == ':' && strings.HasPrefix(key, r.Key)
}
