package clusterview

import (
	"maps"
	"slices"
	"time"
)

// How long a node that starts with others holds its first ring back: until
// its live members stayed the same for FirstRingQuiet (ten gossip rounds
// at the default interval; SettleQuiet for another), and no longer than
// FirstRingWait after it first looked.
const (
	FirstRingQuiet = time.Second
	FirstRingWait  = 10 * time.Second
)

// SettleQuiet is the quiet period for a gossip interval: ten rounds
// (FirstRingQuiet at the default 100 ms), at most FirstRingWait.
func SettleQuiet(gossipInterval time.Duration) time.Duration {
	if gossipInterval <= 0 {
		return FirstRingQuiet
	}
	return min(10*gossipInterval, FirstRingWait)
}

// Settle holds a node's first ring, and its Raft bootstrap, back while
// its member list still grows (nodes started together find each other over about a gossip
// round). A first ring taken from a partial list is followed by a ring
// change per member found later, and nodes that took different first
// rings pull the same partitions from each other: each pull waits for the
// other's, until the asks time out (3 s each, issue 32: 8 nodes started
// at once were ready after 17 s, 16 not within a minute). Nodes that wait
// for a quiet member list take the same first ring, and each pulls only
// from members that hold nothing it owns. Waiting changes no rule of the
// hand-off: a first ring still comes with its base. The bootstrap waits
// too: clusterview.Bootstrap picks the first --bootstrap-expect ids it
// sees, so nodes that see different members (8 started at once with
// --bootstrap-expect 3) would bootstrap different groups.
//
// Settle is owned by the cluster loop; only times are passed in.
type Settle struct {
	Quiet, Wait time.Duration
	ids         []string
	start       int64 // ns of the first look
	since       int64 // ns since which the members are ids
}

// Settling reports whether, at now (ns), the first ring should wait for
// the member list, live being the live members now.
func (s *Settle) Settling(now int64, live map[string]Member) bool {
	ids := slices.Sorted(maps.Keys(live))
	if s.ids == nil {
		s.start = now
	}
	if s.ids == nil || !slices.Equal(ids, s.ids) {
		s.ids, s.since = ids, now
	}
	return now-s.since < int64(s.Quiet) && now-s.start < int64(s.Wait)
}
