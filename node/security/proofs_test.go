package security

import (
	"context"
	"testing"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/ring"
)

// gossip is a fixed membership (membership is another part).
type gossip map[string]clusterview.Member

func (g gossip) Live() map[string]clusterview.Member {
	out := make(map[string]clusterview.Member, len(g))
	for id, m := range g {
		out[id] = m
	}
	return out
}
func (g gossip) Gossiped(id string) (clusterview.Member, bool) { m, ok := g[id]; return m, ok }
func (g gossip) Viewed(id string) (clusterview.Member, bool)   { return clusterview.Member{}, false }
func (g gossip) Ring() *ring.Ring                              { return nil }
func (g gossip) Leaving() bool                                 { return false }
func (g gossip) Changed()                                      {}
func (g gossip) Announce() error                               { return nil }

func newGuard(t *testing.T, id string, boot uint64, key []byte, reg *prometheus.Registry) *Guard {
	t.Helper()
	kr, err := memberlist.NewKeyring(nil, key)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{ID: id, ClusterName: "weir", Boot: boot, Keyring: kr, Registry: reg,
		Ctx: context.Background(), Go: func(f func()) { go f() }}, gossip{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func count(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// A member's gossiped proof is accepted by a node of the same keyring and
// for that member and boot only; a refusal is counted.
func TestProvenMember(t *testing.T) {
	key := peerauth.GenerateKey()
	reg := prometheus.NewRegistry()
	n1 := newGuard(t, "n1", 1, key, reg)
	n2 := newGuard(t, "n2", 7, key, prometheus.NewRegistry())
	outsider := newGuard(t, "n2", 7, peerauth.GenerateKey(), prometheus.NewRegistry())
	refused := n1.refused.WithLabelValues("gossip_member")
	for _, tc := range []struct {
		name string
		id   string
		m    clusterview.Member
		want bool
	}{
		{"its own proof", "n2", clusterview.Member{Boot: 7, Proof: n2.MemberProof()}, true},
		{"another boot", "n2", clusterview.Member{Boot: 8, Proof: n2.MemberProof()}, false},
		{"another member's proof", "n3", clusterview.Member{Boot: 7, Proof: n2.MemberProof()}, false},
		{"another keyring", "n2", clusterview.Member{Boot: 7, Proof: outsider.MemberProof()}, false},
		{"no proof", "n2", clusterview.Member{Boot: 7}, false},
	} {
		before := count(refused)
		if got := n1.ProvenMember(tc.id, tc.m); got != tc.want {
			t.Errorf("%s: proven %v, want %v", tc.name, got, tc.want)
		}
		if counted := count(refused) - before; counted != map[bool]float64{true: 0, false: 1}[tc.want] {
			t.Errorf("%s: %v refusals counted", tc.name, counted)
		}
	}
}

// A caller proven as one node speaks for that node only (with a key); an
// open node (no key, no TLS) takes any claim.
func TestSpeaksFor(t *testing.T) {
	g := newGuard(t, "n1", 1, peerauth.GenerateKey(), prometheus.NewRegistry())
	if err := g.SpeaksFor("n2", "n2"); err != nil {
		t.Errorf("n2 for itself: %v", err)
	}
	if err := g.SpeaksFor("n2", "n3"); err == nil {
		t.Error("n2 for n3: accepted")
	}
	open, err := New(Config{ID: "n1", ClusterName: "weir", Ctx: context.Background(), Go: func(f func()) { go f() }}, gossip{})
	if err != nil {
		t.Fatal(err)
	}
	if err := open.SpeaksFor("", "n3"); err != nil {
		t.Errorf("open node: %v", err)
	}
	// Without TLS every member is admitted at once.
	in := map[string]clusterview.Member{"n2": {ID: "n2", GRPC: "127.0.0.1:1"}}
	if out, wait := open.Admitted(in); len(out) != 1 || wait {
		t.Errorf("admitted without TLS: %v wait %v", out, wait)
	}
}
