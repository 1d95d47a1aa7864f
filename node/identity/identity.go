package identity

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/ring"
)

// Membership is what a Guard reads of the node's members.
type Membership interface {
	// Member reports whether id is in the node's current view or live in
	// gossip (the view lags a member that just joined).
	Member(id string) bool
	// Ring is the node's current ring (nil before the first).
	Ring() *ring.Ring
	// AdmittedRing is the ring of the members admitted now, which the
	// current ring lags by a gossip round (nil when it cannot be built).
	AdmittedRing() *ring.Ring
}

// Config is a Guard's dependencies and waits.
type Config struct {
	// On: callers carry node credentials (a gossip key or TLS). Off, peer
	// callers are on loopback and name no node: nothing is checked.
	On      bool
	Members Membership
	// Refused counts a refusal by kind: non_member, handoff_parts.
	Refused func(kind string)
	// MemberWait bounds how long a call from a node not yet a member waits
	// for gossip to report it.
	MemberWait time.Duration
	// AskWait bounds the same wait for a hand-off ask, which must answer
	// well within the asker's own timeout.
	AskWait time.Duration
}

// Guard checks peer callers against membership.
type Guard struct{ cfg Config }

// New returns a Guard; a nil Refused counts nothing.
func New(cfg Config) *Guard {
	if cfg.Refused == nil {
		cfg.Refused = func(string) {}
	}
	return &Guard{cfg: cfg}
}

// Member refuses, with PermissionDenied, a caller named id that is not a
// member after MemberWait.
func (g *Guard) Member(ctx context.Context, id string) error {
	m := g.cfg.Members
	if !g.cfg.On || m.Member(id) || waitFor(ctx, g.cfg.MemberWait, func() bool { return m.Member(id) }) {
		return nil
	}
	g.cfg.Refused("non_member")
	return notMember(id)
}

// Ask refuses a hand-off ask unless asker is a member and every partition
// asked is plausible for it (Plausible), waiting up to AskWait for that.
func (g *Guard) Ask(ctx context.Context, asker string, parts []uint32) error {
	if !g.cfg.On {
		return nil
	}
	m := g.cfg.Members
	ok := func() bool { return m.Member(asker) && g.Plausible(asker, parts) == nil }
	if ok() || waitFor(ctx, g.cfg.AskWait, ok) {
		return nil
	}
	if !m.Member(asker) {
		g.cfg.Refused("non_member")
		return notMember(asker)
	}
	g.cfg.Refused("handoff_parts")
	return g.Plausible(asker, parts)
}

// Plausible refuses a hand-off ask for partitions the asker can neither
// own nor hold: each must have the asker among its replicas in the node's
// ring or, as that ring lags a gossip round, in the ring of the members
// admitted now. Partitions out of range pass (Serve refuses them).
func (g *Guard) Plausible(asker string, parts []uint32) error {
	if !g.cfg.On {
		return nil
	}
	rest := parts
	if r := g.cfg.Members.Ring(); r != nil {
		rest = notHeld(r, asker, rest)
	}
	if len(rest) > 0 {
		if r := g.cfg.Members.AdmittedRing(); r != nil {
			rest = notHeld(r, asker, rest)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "node: %s asked for %d partitions it neither owns nor holds (partition %d among them)", asker, len(rest), rest[0])
}

func notMember(id string) error {
	return status.Errorf(codes.PermissionDenied, "node: %q is not a member of this node's gossip view", id)
}

// notHeld lists the partitions of parts whose replicas in r do not
// include id (those out of r's range excepted).
func notHeld(r *ring.Ring, id string, parts []uint32) []uint32 {
	var buf []string
	var rest []uint32
	for _, p := range parts {
		if int(p) >= r.PartitionCount() {
			continue
		}
		buf = r.AppendPartitionReplicas(buf[:0], p)
		if !slices.Contains(buf, id) {
			rest = append(rest, p)
		}
	}
	return rest
}

// waitFor polls ok every 50 ms until it holds (true), d passed or ctx
// ended (false).
func waitFor(ctx context.Context, d time.Duration, ok func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if ok() {
				return true
			}
		case <-deadline.C:
			return ok()
		case <-ctx.Done():
			return false
		}
	}
}
