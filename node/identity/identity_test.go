package identity

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/ring"
)

// members is the node's membership as a test sets it.
type members struct {
	live     atomic.Value // []string
	asked    atomic.Int32 // Member calls
	lateID   string       // a member gossip reports from the third Member call on
	ring     *ring.Ring
	admitted *ring.Ring
}

func (m *members) Member(id string) bool {
	if m.asked.Add(1) >= 3 && id == m.lateID && id != "" {
		return true
	}
	l, _ := m.live.Load().([]string)
	return slices.Contains(l, id)
}
func (m *members) Ring() *ring.Ring         { return m.ring }
func (m *members) AdmittedRing() *ring.Ring { return m.admitted }
func newRing(t *testing.T, ids ...string) *ring.Ring {
	t.Helper()
	r, err := ring.New(ids, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// notHeldBy lists partitions whose replicas in r exclude id.
func notHeldBy(r *ring.Ring, id string) []uint32 {
	var out []uint32
	for p := range uint32(r.PartitionCount()) {
		if !slices.Contains(r.PartitionReplicas(p), id) {
			out = append(out, p)
		}
	}
	return out
}

func guard(m *members, refused *[]string) *Guard {
	return New(Config{On: true, Members: m, MemberWait: 200 * time.Millisecond, AskWait: 200 * time.Millisecond,
		Refused: func(k string) { *refused = append(*refused, k) }})
}

func TestMemberWaitsForGossipThenRefuses(t *testing.T) {
	m := &members{}
	m.live.Store([]string{"n1", "n2"})
	var refused []string
	g := guard(m, &refused)
	if err := g.Member(context.Background(), "n2"); err != nil {
		t.Fatalf("member n2: %v", err)
	}
	if err := g.Member(context.Background(), "n9"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("non-member n9: %v, want PermissionDenied", err)
	}
	// A member gossip reports while the call waits (polls) is admitted.
	m.lateID = "n3"
	m.asked.Store(0)
	if err := g.Member(context.Background(), "n3"); err != nil {
		t.Fatalf("n3 joining during the wait: %v", err)
	}
	if !slices.Equal(refused, []string{"non_member"}) {
		t.Fatalf("refusals counted %v, want [non_member]", refused)
	}
	if err := New(Config{Members: m}).Member(context.Background(), "n9"); err != nil {
		t.Fatalf("guard off (no credentials): %v", err)
	}
}

func TestAskOnlyForPartitionsTheAskerMayHold(t *testing.T) {
	m := &members{ring: newRing(t, "n1", "n2", "n3")}
	m.live.Store([]string{"n1", "n2", "n3", "n4"})
	var refused []string
	g := guard(m, &refused)
	held := slices.DeleteFunc(seq(m.ring.PartitionCount()), func(p uint32) bool { return slices.Contains(notHeldBy(m.ring, "n2"), p) })
	if err := g.Ask(context.Background(), "n2", held); err != nil {
		t.Fatalf("n2 asking for what it holds: %v", err)
	}
	all := seq(m.ring.PartitionCount())
	if err := g.Ask(context.Background(), "n2", all); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("n2 asking for every partition: %v, want PermissionDenied", err)
	}
	// n4 joined: this node's ring lags, the admitted members' ring has it.
	n4 := notHeldBy(newRing(t, "n1", "n2", "n3", "n4"), "n4")
	want := slices.DeleteFunc(seq(m.ring.PartitionCount()), func(p uint32) bool { return slices.Contains(n4, p) })
	if err := g.Ask(context.Background(), "n4", want); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("n4 before its ring is known: %v, want PermissionDenied", err)
	}
	m.admitted = newRing(t, "n1", "n2", "n3", "n4")
	if err := g.Ask(context.Background(), "n4", want); err != nil {
		t.Fatalf("n4 by the admitted members' ring: %v", err)
	}
	if err := g.Ask(context.Background(), "n9", want); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("non-member n9: %v, want PermissionDenied", err)
	}
	if !slices.Equal(refused, []string{"handoff_parts", "handoff_parts", "non_member"}) {
		t.Fatalf("refusals counted %v", refused)
	}
}

func seq(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}
