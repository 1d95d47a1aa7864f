package router

import (
	"cmp"
	"slices"
	"sync"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
)

// checkScratch holds a check's local part; reused through scratchPool (the
// engine copies what it keeps, so nothing refers to it after check).
type checkScratch struct {
	local  []shard.Item
	idx    []int
	out    []shard.Result
	parts  []uint32 // distinct partitions of the local part, ascending
	pinned []uint32 // partitions pinned for the local part
	waits  []uint32 // partitions to wait for (replication.Wait)
	seen   []uint8  // by partition: pinSeen, pinLost (reset by unpin)
	// remote holds the forwarded parts, one per destination; its entries
	// (and their idx buffers) are kept for the next check.
	remote []remoteCall
}

const (
	pinSeen uint8 = 1 + iota // pinned
	pinLost                  // handed off since it was routed
)

// pin pins the partitions of the local part against a hand-off
// (replication.Handoff.Pin), in ascending order; partitions is the ring's
// partition count. The items of a partition handed off since they were
// routed go where the router says (Router.Reroute: after its counters),
// none of them decided here, so one key's rules are not split between
// this node and the new holder.
func (sc *checkScratch) pin(h Handoff, rt *replication.Router, partitions int, items []limit.Item, res []limit.Result, forwarded bool) {
	if len(sc.local) == 0 {
		return
	}
	lost := sc.pinParts(h, partitions)
	if lost == nil {
		return
	}
	k := 0
	for j, it := range sc.local {
		i := sc.idx[j]
		if sc.seen[it.Partition] != pinLost {
			sc.local[k], sc.idx[k] = it, i
			k++
			continue
		}
		at, _ := slices.BinarySearchFunc(lost, it.Partition, func(m movedTo, p uint32) int { return cmp.Compare(m.p, p) })
		switch to := rt.Reroute(it.Partition, lost[at].to, replication.Via{Forwarded: forwarded, Hops: items[i].Hops}); to.Do {
		case replication.Forward:
			sc.addRemote(to.To, i)
		default: // a moved partition is never decided here
			res[i].Code, res[i].Err = limit.CodeUnavailable, to.Why
		}
	}
	sc.local, sc.idx = sc.local[:k], sc.idx[:k]
	for _, m := range lost {
		sc.seen[m.p] = 0
	}
}

// pinParts pins the distinct partitions of the local part in ascending
// order and returns those found handed off (marked pinLost), ascending.
func (sc *checkScratch) pinParts(h Handoff, partitions int) []movedTo {
	if len(sc.seen) < partitions {
		sc.seen = make([]uint8, partitions)
	}
	for _, it := range sc.local {
		if sc.seen[it.Partition] == 0 {
			sc.seen[it.Partition] = pinSeen
			sc.parts = append(sc.parts, it.Partition)
		}
	}
	slices.Sort(sc.parts)
	var lost []movedTo // ascending, as sc.parts
	for _, p := range sc.parts {
		ok, to := h.Pin(p)
		if ok {
			sc.pinned = append(sc.pinned, p)
			continue
		}
		sc.seen[p] = pinLost
		lost = append(lost, movedTo{p, to})
	}
	sc.parts = sc.parts[:0]
	return lost
}

// movedTo is a partition Pin found handed off, and where it went.
type movedTo struct {
	p  uint32
	to string
}

// unpin releases the partitions pin pinned.
func (sc *checkScratch) unpin(h Handoff) {
	for _, p := range sc.pinned {
		h.Unpin(p)
		sc.seen[p] = 0
	}
	sc.pinned = sc.pinned[:0]
}

// sortedRemote returns the forwarded parts in the order of their
// destinations' names, so forwards are queued in the same order every time.
func (sc *checkScratch) sortedRemote() []remoteCall {
	slices.SortFunc(sc.remote, func(a, b remoteCall) int { return cmp.Compare(a.dest, b.dest) })
	return sc.remote
}

// addRemote adds item i to the part of a check forwarded to dest (a check
// has few destinations: a scan finds its part).
func (sc *checkScratch) addRemote(dest string, i int) {
	for j := range sc.remote {
		if sc.remote[j].dest == dest {
			sc.remote[j].idx = append(sc.remote[j].idx, i)
			return
		}
	}
	if n := len(sc.remote); n < cap(sc.remote) {
		sc.remote = sc.remote[:n+1]
		sc.remote[n].dest, sc.remote[n].idx = dest, append(sc.remote[n].idx[:0], i)
		return
	}
	sc.remote = append(sc.remote, remoteCall{dest: dest, idx: []int{i}})
}

// scratchPool recycles checkScratch values. It carries no state between
// calls, so routers sharing a process do not see each other.
var scratchPool = sync.Pool{New: func() any { return new(checkScratch) }}

// maxPooledItems bounds what a pooled scratch keeps, so one huge batch does
// not pin memory.
const maxPooledItems = 4096

func (sc *checkScratch) release() {
	if cap(sc.local) > maxPooledItems {
		return
	}
	for _, rc := range sc.remote {
		if cap(rc.idx) > maxPooledItems {
			return
		}
	}
	sc.local, sc.idx, sc.out, sc.parts, sc.pinned, sc.waits = sc.local[:0], sc.idx[:0], sc.out[:0], sc.parts[:0], sc.pinned[:0], sc.waits[:0]
	for j := range sc.remote {
		sc.remote[j].dest, sc.remote[j].p = "", nil
	}
	sc.remote = sc.remote[:0]
	scratchPool.Put(sc)
}
