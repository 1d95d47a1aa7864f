package forward

import (
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/limit/limitpb"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// appendItems appends copies of items[idx] to dst to send to an owner,
// each carrying at least rule version ver, so the owner waits for the rule
// set they were matched against, and its hop count: 0 for a caller's
// items, one more for items this node was forwarded. The caller's items
// are not changed.
func appendItems(dst, items []limit.Item, idx []int, ver uint64, forwarded bool) []limit.Item {
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

// wireItems is the writer's request buffer, reused from one request to
// the next (grpc-go has encoded a message when Send returns).
type wireItems struct {
	block []weirv1.CheckItem
	ptrs  []*weirv1.CheckItem
	// groups maps the current call's group ids to the batch's: the
	// owner decides the whole batch as one Check, where a group id means
	// all-or-nothing, so two callers' groups must not share an id.
	groups [][2]uint32
	gmap   map[uint32]uint32 // instead of groups once a call has many
}

// group returns the batch's id for the current call's group g, taking the
// next one the first time g is seen.
func (w *wireItems) group(g uint32, next *uint32) uint32 {
	if w.gmap != nil {
		if id, ok := w.gmap[g]; ok {
			return id
		}
		*next++
		w.gmap[g] = *next
		return *next
	}
	for _, p := range w.groups {
		if p[0] == g {
			return p[1]
		}
	}
	*next++
	w.groups = append(w.groups, [2]uint32{g, *next})
	if len(w.groups) > 8 { // many groups in one call: a map from here on
		w.gmap = make(map[uint32]uint32, 2*len(w.groups))
		for _, p := range w.groups {
			w.gmap[p[0]] = p[1]
		}
	}
	return *next
}

// set fills the buffer with the batch's items, in order, and returns them.
func (w *wireItems) set(batch []*Call) []*weirv1.CheckItem {
	n := 0
	for _, c := range batch {
		n += len(c.items)
	}
	if cap(w.block) < n {
		w.block = make([]weirv1.CheckItem, n)
		w.ptrs = make([]*weirv1.CheckItem, n)
	}
	w.block, w.ptrs = w.block[:n], w.ptrs[:n]
	k := 0
	var next uint32 // the batch's group ids, renumbered per call
	for _, c := range batch {
		w.groups, w.gmap = w.groups[:0], nil
		for i := range c.items {
			limitpb.ItemToProto(&w.block[k], &c.items[i])
			if g := c.items[i].Group; g != 0 {
				w.block[k].Group = w.group(g, &next)
			}
			w.ptrs[k] = &w.block[k]
			k++
		}
	}
	return w.ptrs
}
