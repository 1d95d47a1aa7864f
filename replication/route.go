package replication

// Action is what a check does with an item of one partition.
type Action uint8

// Actions.
const (
	// Decide: decide it here now (pinned against a hand-off, Handoff.Pin).
	Decide Action = iota
	// Wait: decide it here once the partition's counters have arrived
	// (Routes.Ready): the partition is pending and no live previous holder
	// can decide it meanwhile, or a peer forwarded it here.
	Wait
	// Forward: send it to Route.To, which decides it or passes it on.
	Forward
	// Unavailable: no node can decide it now; Route.Why says why.
	Unavailable
)

var actionNames = [...]string{"decide", "wait", "forward", "unavailable"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "Action(?)"
}

// MaxHops bounds how many times nodes pass one item on after its first
// forward. Items routed by the ring are passed on at most once (see
// Router.Route); only moved marks chain further, one link per hand-off a
// node has not caught up with, so a longer chain is two marks pointing at
// each other (a take-back whose answer was lost) and the item is answered
// unavailable rather than sent round the loop until its deadline.
const MaxHops = 8

// Unavailable reasons (Route.Why).
const (
	whyNoOwner = "no owner for key"
	whyHops    = "passed on too many times (moved marks form a loop); retry"
)

// Route is where a check sends an item of one partition now.
type Route struct {
	Do  Action
	To  string // Forward: the node to send it to
	Why string // Unavailable: the reason, for the caller's answer
}

// Table is the hand-off's state of each partition: the published *Routes
// a check reads, or the *Partitions machine they are published from.
type Table interface {
	State(p uint32) (PartState, string)
}

// View is the cluster as the routing node sees it.
type View interface {
	// PartitionOwner is p's owner by the node's ring ("" when none).
	PartitionOwner(p uint32) string
	// Member reports whether id is in the node's member list (leaving
	// members included).
	Member(id string) bool
}

// Via is how an item reached the routing node.
type Via struct {
	// Forwarded: a peer sent it, believing this node owns its partition.
	Forwarded bool
	// Hops: how many times nodes passed it on after its first forward
	// (set by nodes only; ignored when not Forwarded).
	Hops uint32
}

// Router says where node Self sends the checks of each partition, from
// the hand-off's Table and the node's View of the ring. It is pure: no
// I/O, no clock, no state of its own; the check path builds one per check
// from the snapshots it reads and obeys what Route says.
type Router struct {
	Self string
	// Leaving: Self is out of the ring and still decides what it holds
	// until the new owners pull it.
	Leaving bool
	Table   Table
	View    View
}

// Route says where an item of partition p goes now:
//
//   - ready: decided here, unless the ring gave p away (a hand-off that
//     finished after a newer ring change): then routed by the ring as
//     below. A leaving node decides what is ready here.
//   - pending: forwarded to the previous holder while it is a member (it
//     decides or says where the counters went); it waits here for the
//     counters when there is none, or when a peer forwarded the item
//     (that peer sent it here as the owner; sending it back would bounce).
//   - moved: forwarded to the node that pulled p; by the ring when that
//     node is unknown, and never decided here (the counters left).
//   - otherwise (none, released): the ring's owner decides. A forwarded
//     item is decided here instead when this node holds the counters, the
//     ring names no owner, or the item was passed on once already: a peer
//     with a different ring sent it here, and this node's ring owner holds
//     the counters or knows where they went, so one more hop reaches them
//     and a second could only bounce.
//
// A forwarded item is never passed on once it has MaxHops hops.
func (r *Router) Route(p uint32, via Via) Route {
	st, peer := r.Table.State(p)
	return r.route(p, st, peer, via)
}

// Reroute says where an item of partition p goes when Route said Decide
// but p was handed off to movedTo ("" when unknown) before the check
// pinned it (Handoff.Pin failed): it follows the counters, as Route does
// for a moved partition.
func (r *Router) Reroute(p uint32, movedTo string, via Via) Route {
	return r.route(p, PartMoved, movedTo, via)
}

func (r *Router) route(p uint32, st PartState, peer string, via Via) Route {
	owner := r.View.PartitionOwner(p)
	switch st {
	case PartReady:
		if owner == r.Self || r.Leaving {
			return Route{Do: Decide}
		}
	case PartPending:
		if via.Forwarded || peer == "" || !r.View.Member(peer) {
			return Route{Do: Wait}
		}
		return pass(peer, via)
	case PartMoved:
		if peer == "" && owner == r.Self {
			return Route{Do: Unavailable, Why: whyNoOwner}
		}
		if peer == "" {
			peer = owner
		}
		return pass(peer, via)
	}
	if owner == r.Self || (via.Forwarded && (st.Holds() || via.Hops > 0 || owner == "")) {
		return Route{Do: Decide}
	}
	return pass(owner, via)
}

// pass forwards to node to, unless there is none or the item has passed
// through MaxHops nodes already.
func pass(to string, via Via) Route {
	switch {
	case to == "":
		return Route{Do: Unavailable, Why: whyNoOwner}
	case via.Forwarded && via.Hops >= MaxHops:
		return Route{Do: Unavailable, Why: whyHops}
	}
	return Route{Do: Forward, To: to}
}
