package node

import (
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/router"
)

// forwardItems copies items[idx] to send to an owner, each carrying at
// least rule version ver, so the owner waits for the rule set they were
// matched against, and its hop count: 0 for a caller's items, one more for
// items this node was forwarded. The caller's items are not changed.
func forwardItems(items []limit.Item, idx []int, ver uint64, forwarded bool) []limit.Item {
	return appendForwardItems(make([]limit.Item, 0, len(idx)), items, idx, ver, forwarded)
}

// appendForwardItems is forwardItems appending to dst.
func appendForwardItems(dst, items []limit.Item, idx []int, ver uint64, forwarded bool) []limit.Item {
	for _, i := range idx {
		it := items[i]
		var hops uint32
		if forwarded {
			hops = it.Hops + 1
		}
		it.RuleVersion, it.Hops = max(it.RuleVersion, ver), hops
		dst = append(dst, it)
	}
	return dst
}

// errUnavailable is the node's "cannot answer now" (no ring yet, no
// view); it is limit.ErrUnavailable, so the edges answer Unavailable / 503.
var errUnavailable = router.ErrUnavailable
