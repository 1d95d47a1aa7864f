package router

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/node/shard"
	"github.com/weirlimit/weir/replication"
	"github.com/weirlimit/weir/ring"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// The router's parts in these tests are real (a shard engine, a
// replication.Handoff, the rule model) but for the network: the forwarder
// is fake, and the cluster view and rule set are fixed values.

const testRules = `
rules:
  - id: r
    match: {route: /r, method: GET, plan: "*"}
    key: apikey
    rate: 2
    period: 1h
    burst: 2
  - id: big
    match: {route: /big, method: GET, plan: "*"}
    key: apikey
    rate: 100
    period: 1h
    burst: 100
`

// fixedRules is a rule set that does not change.
type fixedRules struct{ set *rules.Set }

func (f fixedRules) Current() *rules.Set { return f.set }

func (f fixedRules) WaitVersion(ctx context.Context, newerThan uint64) (*rules.Set, error) {
	if f.set != nil && f.set.Version > newerThan {
		return f.set, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// fixedView is a cluster view over a ring of members.
type fixedView struct {
	ring    *ring.Ring
	members []string
}

func (v *fixedView) PartitionOwner(p uint32) string { return v.ring.PartitionOwner(p) }
func (v *fixedView) Member(id string) bool          { return slices.Contains(v.members, id) }
func (v *fixedView) Addr(id string) (string, bool) {
	if !v.Member(id) {
		return "", false
	}
	return id + ":9090", true
}

// fakeForwarder records what it is asked to send and answers each item
// allowed, or fails every call with err.
type fakeForwarder struct {
	mu    sync.Mutex
	sent  map[string][]limit.Item // by destination
	err   error
	calls int
}

func (f *fakeForwarder) Start(_ context.Context, dest string, items []limit.Item, idx []int, ver uint64, forwarded bool) Pending {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.sent == nil {
		f.sent = map[string][]limit.Item{}
	}
	for _, i := range idx {
		it := items[i]
		it.RuleVersion = max(it.RuleVersion, ver)
		f.sent[dest] = append(f.sent[dest], it)
	}
	return fakePending{idx: slices.Clone(idx), err: f.err}
}

type fakePending struct {
	idx []int
	err error
}

func (p fakePending) Wait(_ context.Context, res []limit.Result) error {
	if p.err != nil {
		return p.err
	}
	for _, i := range p.idx {
		res[i] = limit.Result{Allowed: true, Remaining: 41}
	}
	return nil
}

// countingObserver counts what the router reports.
type countingObserver struct {
	mu       sync.Mutex
	observed int // items
	capped   []string
}

func (o *countingObserver) Observe(items []limit.Item, _ []limit.Result, _ time.Duration) {
	o.mu.Lock()
	o.observed += len(items)
	o.mu.Unlock()
}

func (o *countingObserver) KeyCapped(rule string) {
	o.mu.Lock()
	o.capped = append(o.capped, rule)
	o.mu.Unlock()
}

// fixture is a router for node self of a ring over members, with a
// running hand-off that served the ring.
type fixture struct {
	r    *Router
	h    *replication.Handoff
	view *fixedView
	fwd  *fakeForwarder
	obs  *countingObserver
	done chan struct{}
}

func newFixture(t *testing.T, self string, members ...string) *fixture {
	t.Helper()
	ctx := context.Background()
	rg, err := ring.New(members, ring.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	eng, err := shard.New(shard.Config{Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	eng.Start()
	t.Cleanup(eng.Close)
	h, err := replication.NewHandoff(replication.DefaultHandoffConfig(self, rg.PartitionCount()), eng, noPeers{}, replication.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- h.Run(hctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Error(err)
		}
	})
	live := map[string]string{}
	for _, m := range members {
		live[m] = ""
	}
	if err := h.ChangeRing(ctx, replication.RingChanged{Place: clusterview.Assignments(rg), Members: members, Live: live}); err != nil {
		t.Fatal(err)
	}
	rs, err := rules.ParseFile([]byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: h, view: &fixedView{ring: rg, members: members}, fwd: &fakeForwarder{}, obs: &countingObserver{}, done: make(chan struct{})}
	f.r, err = New(Config{
		Self: self, Rules: fixedRules{rules.NewSet(3, rs, nil)}, Engine: eng, Handoff: h,
		View: f.currentView, Leaving: func() bool { return false }, Forward: f.fwd,
		Now: func() int64 { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() }, Observer: f.obs,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Done: f.done,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// currentView is the router's view source: f.view (nil: no ring yet).
func (f *fixture) currentView() (*ring.Ring, View) {
	if f.view == nil {
		return nil, nil
	}
	return f.view.ring, f.view
}

// keysOwnedBy returns n keys of the ring owned by id.
func (f *fixture) keysOwnedBy(t *testing.T, id string, n int) []string {
	t.Helper()
	var keys []string
	for k := 0; len(keys) < n && k < 100000; k++ {
		key := "apikey:k" + string(rune('a'+k%26)) + itoa(k)
		if f.view.ring.PartitionOwner(f.view.ring.Partition(key)) == id {
			keys = append(keys, key)
		}
	}
	if len(keys) < n {
		t.Fatalf("found %d keys owned by %s, want %d", len(keys), id, n)
	}
	return keys
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
		if i == 0 {
			return string(b)
		}
	}
}

// noPeers answers no hand-off: the test's node is alone.
type noPeers struct{}

func (noPeers) Handoff(context.Context, string, replication.HandoffRequest) (replication.HandoffReply, error) {
	return replication.HandoffReply{}, errors.New("no peers in this test")
}

// A check pins the partitions it routed here; one handed off since then is
// rerouted after its counters (replication.Router.Reroute), all its items
// together, and an item at the hop limit is answered unavailable instead.
// The rest stay local, pinned until the check unpins them.
func TestPinReroutesPartitionsHandedOff(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "a", "a")
	h, r := f.h, f.view.ring
	const kept, lost = 3, 7
	if _, err := h.Serve(ctx, replication.HandoffRequest{To: "c", Parts: []uint32{lost}}); err != nil {
		t.Fatal(err)
	}

	rt := replication.Router{Self: "a", Table: h.Routes(), View: f.view}
	items := []limit.Item{{Key: "k0"}, {Key: "k1"}, {Key: "k2", Hops: replication.MaxHops}, {Key: "k3"}}
	res := make([]limit.Result, len(items))
	sc := &checkScratch{
		local: []shard.Item{{Partition: lost}, {Partition: kept}, {Partition: lost}, {Partition: kept}},
		idx:   []int{0, 1, 2, 3},
	}
	sc.pin(h, &rt, r.PartitionCount(), items, res, true)
	if rem := sc.sortedRemote(); len(rem) != 1 || rem[0].dest != "c" || !slices.Equal(rem[0].idx, []int{0}) {
		t.Errorf("forwarded %+v, want item 0 to c", rem)
	}
	if res[2].Code != limit.CodeUnavailable || res[2].Err == "" {
		t.Errorf("item at the hop limit: %+v, want unavailable", res[2])
	}
	if !slices.Equal(sc.idx, []int{1, 3}) || len(sc.local) != 2 || !slices.Equal(sc.pinned, []uint32{kept}) {
		t.Errorf("local part: items %v pinned %v, want items [1 3], pinned [%d]", sc.idx, sc.pinned, kept)
	}
	sc.unpin(h)
	if slices.ContainsFunc(sc.seen, func(s uint8) bool { return s != 0 }) {
		t.Error("scratch marks left after unpin")
	}
	// Unpinned: a hand-off of the kept partition is not held off.
	if _, err := h.Serve(ctx, replication.HandoffRequest{To: "c", Parts: []uint32{kept}}); err != nil {
		t.Fatal(err)
	}
}

// A lone node decides every item locally: counted down per key, an
// unknown rule answered as such, every item observed once.
func TestCheckDecidesLocally(t *testing.T) {
	f := newFixture(t, "a", "a")
	items := []limit.Item{{Key: "apikey:x", Rule: "r", Cost: 1}, {Key: "apikey:x", Rule: "r", Cost: 1}, {Key: "apikey:x", Rule: "r", Cost: 1}, {Key: "apikey:x", Rule: "nope", Cost: 1}}
	res := make([]limit.Result, len(items))
	if err := f.r.Check(context.Background(), items, res); err != nil {
		t.Fatal(err)
	}
	if !res[0].Allowed || !res[1].Allowed || res[2].Allowed || res[0].RuleVersion != 3 || res[0].Limit != 2 {
		t.Errorf("burst 2: %+v, want two allowed then one denied, at version 3", res[:3])
	}
	if res[3].Code != limit.CodeUnknownRule {
		t.Errorf("unknown rule: %+v", res[3])
	}
	if f.fwd.calls != 0 || f.obs.observed != len(items) {
		t.Errorf("forwards %d, observed %d: want 0 and %d", f.fwd.calls, f.obs.observed, len(items))
	}
}

// Items owned by another member are forwarded to it, one call per
// destination, at the view's rule version; a forward that fails answers
// its items unavailable naming the owner, the local items decided.
func TestCheckForwardsToOwner(t *testing.T) {
	f := newFixture(t, "a", "a", "b")
	local, remote := f.keysOwnedBy(t, "a", 1)[0], f.keysOwnedBy(t, "b", 2)
	items := []limit.Item{{Key: remote[0], Rule: "r", Cost: 1}, {Key: local, Rule: "r", Cost: 1}, {Key: remote[1], Rule: "r", Cost: 1}}
	res := make([]limit.Result, len(items))
	if err := f.r.Check(context.Background(), items, res); err != nil {
		t.Fatal(err)
	}
	sent := f.fwd.sent["b"]
	if f.fwd.calls != 1 || len(f.fwd.sent) != 1 || len(sent) != 2 || sent[0].Key != remote[0] || sent[1].Key != remote[1] || sent[0].RuleVersion != 3 {
		t.Fatalf("forwarded %+v in %d calls, want items 0 and 2 to b in one call at version 3", f.fwd.sent, f.fwd.calls)
	}
	if res[0].Remaining != 41 || res[2].Remaining != 41 || !res[1].Allowed || res[1].Remaining != 1 {
		t.Errorf("results %+v, want the owner's answers for 0 and 2, a local decision for 1", res)
	}

	f.fwd.err = errors.New("link down")
	clear(res)
	if err := f.r.Check(context.Background(), items, res); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		if res[i].Code != limit.CodeUnavailable || res[i].Err != "owner b unreachable: link down" {
			t.Errorf("item %d: %+v, want unavailable naming b", i, res[i])
		}
	}
	if !res[1].Allowed {
		t.Errorf("local item: %+v, want allowed", res[1])
	}
}

// A peer's items for a partition handed off are sent on after its
// counters; at the hop limit they are answered unavailable, never decided
// here.
func TestCheckForwardedFollowsHandoff(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "a", "a")
	key := "apikey:moved"
	p := f.view.ring.Partition(key)
	if _, err := f.h.Serve(ctx, replication.HandoffRequest{To: "c", Parts: []uint32{p}}); err != nil {
		t.Fatal(err)
	}
	f.view.members = append(f.view.members, "c")
	items := []limit.Item{{Key: key, Rule: "r", Cost: 1}, {Key: key, Rule: "r", Cost: 1, Hops: replication.MaxHops}}
	res := make([]limit.Result, len(items))
	if err := f.r.CheckForwarded(ctx, items, res); err != nil {
		t.Fatal(err)
	}
	if got := f.fwd.sent["c"]; len(got) != 1 || got[0].Hops != 0 || res[0].Remaining != 41 {
		t.Errorf("sent %+v, result %+v: want item 0 sent to c and its answer", f.fwd.sent, res[0])
	}
	if res[1].Code != limit.CodeUnavailable || res[1].Allowed {
		t.Errorf("item at the hop limit: %+v, want unavailable", res[1])
	}
	if f.obs.observed != 0 {
		t.Errorf("observed %d forwarded items, want 0 (the entry node observes)", f.obs.observed)
	}
}

// A group is all-or-nothing: the denied item voids the allowed one, whose
// tokens the router gives back in a second check (its key is whole again).
func TestGroupSettlementRefunds(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "a", "a")
	// Spend "r" for key y, so a group asking r:y and big:z is denied on y.
	spend := []limit.Item{{Key: "apikey:y", Rule: "r", Cost: 2}}
	if err := f.r.Check(ctx, spend, make([]limit.Result, 1)); err != nil {
		t.Fatal(err)
	}
	group := []limit.Item{{Key: "apikey:z", Rule: "big", Cost: 10, Group: 1}, {Key: "apikey:y", Rule: "r", Cost: 1, Group: 1}}
	res := make([]limit.Result, len(group))
	if err := f.r.Check(ctx, group, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Allowed || !res[0].Voided || res[1].Allowed {
		t.Fatalf("group %+v, want both not allowed, the first voided", res)
	}
	peek := []limit.Item{{Key: "apikey:z", Rule: "big"}}
	out := make([]limit.Result, 1)
	if err := f.r.Check(ctx, peek, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 100 {
		t.Errorf("big:z remaining %d after the refund, want 100", out[0].Remaining)
	}
}

// voidGroups voids the allowed members of a denied group and lists their
// refunds; shadow items, refunds and other groups are left alone.
func TestVoidGroups(t *testing.T) {
	items := []limit.Item{
		{Key: "a", Rule: "r", Cost: 2, Group: 1},
		{Key: "b", Rule: "r", Cost: 1, Group: 1},
		{Key: "c", Rule: "s", Cost: 1, Group: 1},
		{Key: "d", Rule: "r", Cost: 1, Group: 2},
	}
	res := []limit.Result{{Allowed: true, LeaseGranted: 3}, {Allowed: false}, {Allowed: true, Shadow: true}, {Allowed: true}}
	refunds := voidGroups(items, res)
	if len(refunds) != 1 || refunds[0].Key != "a" || refunds[0].Cost != 5 || !refunds[0].Refund {
		t.Errorf("refunds %+v, want a's cost with its lease's tokens (5)", refunds)
	}
	if res[0].Allowed || !res[0].Voided || res[0].LeaseGranted != 0 || !res[2].Allowed || res[2].Voided || !res[3].Allowed {
		t.Errorf("results %+v", res)
	}
	if got := voidGroups(items[3:], res[3:]); got != nil {
		t.Errorf("no group denied: refunds %+v", got)
	}
}

// Without a ring a check fails as a whole (ErrUnavailable); once the node
// closed, with ErrClosed; results as long as items are required.
func TestCheckErrors(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "a", "a")
	items := []limit.Item{{Key: "apikey:x", Rule: "r", Cost: 1}}
	if err := f.r.Check(ctx, items, nil); err == nil {
		t.Error("no results slice: no error")
	}
	v := f.view
	f.view = nil
	if err := f.r.Check(ctx, items, make([]limit.Result, 1)); !errors.Is(err, ErrUnavailable) || !errors.Is(err, limit.ErrUnavailable) {
		t.Errorf("no ring: %v, want ErrUnavailable", err)
	}
	f.view = v
	close(f.done)
	if err := f.r.Check(ctx, items, make([]limit.Result, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v, want ErrClosed", err)
	}
	if _, err := New(Config{Self: "a"}); err == nil {
		t.Error("New without parts: no error")
	}
}

// Limits peeks every rule of the key's type, sorted, taking nothing.
func TestLimitsPeeks(t *testing.T) {
	f := newFixture(t, "a", "a")
	items, res, err := f.r.Limits(context.Background(), "apikey:p")
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].Rule != "big" || items[1].Rule != "r" || res[0].Remaining != 100 || res[1].Remaining != 2 {
		t.Errorf("limits %+v %+v, want big (100) and r (2)", items, res)
	}
	if items, _, _ := f.r.Limits(context.Background(), "user:p"); len(items) != 0 {
		t.Errorf("a key type no rule limits: %+v", items)
	}
}

// The forwarded parts are grouped by destination, listed in the order of
// the destinations' names, and a reused scratch starts empty (its parts'
// buffers are kept, their contents are not).
func TestScratchRemoteParts(t *testing.T) {
	sc := &checkScratch{}
	for round := range 2 {
		for _, a := range []struct {
			dest string
			i    int
		}{{"n2", 0}, {"n1", 1}, {"n2", 2}, {"n3", 4}} {
			sc.addRemote(a.dest, a.i+round)
		}
		got := sc.sortedRemote()
		want := []remoteCall{{dest: "n1", idx: []int{1 + round}}, {dest: "n2", idx: []int{round, 2 + round}}, {dest: "n3", idx: []int{4 + round}}}
		if !slices.EqualFunc(got, want, func(a, b remoteCall) bool { return a.dest == b.dest && slices.Equal(a.idx, b.idx) }) {
			t.Fatalf("round %d: parts %+v, want %+v", round, got, want)
		}
		sc.release()
		sc = scratchPool.Get().(*checkScratch)
		if len(sc.remote) != 0 {
			t.Fatalf("round %d: a released scratch keeps %d parts", round, len(sc.remote))
		}
	}
}
