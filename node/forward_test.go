package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/limit"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// ForwardStream decides each request as Forward would (burst 3, then
// denied; a malformed item gets its own error), answers with the request's
// id, and the stream goes on after each request until the caller closes it.
func TestForwardStreamAnswersEachRequest(t *testing.T) {
	c := testcluster.New(t, 2)
	c.ApplyRules(checkRules)
	owner := c.Nodes[0]
	local, _ := keysByOwner(t, owner)

	cc, err := grpc.NewClient(owner.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	st, err := weirv1.NewPeerClient(cc).ForwardStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	item := func() *weirv1.CheckItem { return &weirv1.CheckItem{Key: local, Rule: "three", Cost: 1} }
	for _, step := range []struct {
		id    uint64
		items []*weirv1.CheckItem
		want  []string // per item: "allowed", "denied" or an error code
	}{
		{7, []*weirv1.CheckItem{item(), item()}, []string{"allowed", "allowed"}},
		{3, []*weirv1.CheckItem{item(), {Key: "", Rule: "three", Cost: 1}, item()}, []string{"allowed", "ERROR_CODE_INVALID_ARGUMENT", "denied"}},
		{8, []*weirv1.CheckItem{item()}, []string{"denied"}},
	} {
		if err := st.Send(&weirv1.CheckStreamRequest{Id: step.id, Items: step.items}); err != nil {
			t.Fatalf("request %d: send: %v", step.id, err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("request %d: recv: %v", step.id, err)
		}
		if resp.Id != step.id || resp.ErrorCode != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED || len(resp.Results) != len(step.want) {
			t.Fatalf("request %d answered %v", step.id, resp)
		}
		for i, r := range resp.Results {
			got := "denied"
			switch {
			case r.ErrorCode != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED:
				got = r.ErrorCode.String()
			case r.Allowed:
				got = "allowed"
			}
			if got != step.want[i] {
				t.Errorf("request %d item %d: %s (%v), want %s", step.id, i, got, r, step.want[i])
			}
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
}

// legacyPeer is a node built before ForwardStream: it relays the unary
// Peer RPCs to the real node behind it and answers Unimplemented to
// ForwardStream (from the embedded UnimplementedPeerServer).
type legacyPeer struct {
	weirv1.UnimplementedPeerServer
	real       weirv1.PeerClient
	forwards   atomic.Int64
	replicates atomic.Int64
}

func (p *legacyPeer) Forward(ctx context.Context, req *weirv1.CheckRequest) (*weirv1.CheckResponse, error) {
	p.forwards.Add(1)
	return p.real.Forward(ctx, req)
}

func (p *legacyPeer) Replicate(ctx context.Context, req *weirv1.ReplicateRequest) (*weirv1.ReplicateResponse, error) {
	p.replicates.Add(1)
	return p.real.Replicate(ctx, req)
}

func (p *legacyPeer) Handoff(ctx context.Context, req *weirv1.HandoffRequest) (*weirv1.HandoffResponse, error) {
	return p.real.Handoff(ctx, req)
}

// A node whose peers answer Unimplemented to ForwardStream and
// ReplicateStream (older nodes) forwards with unary Forward RPCs and
// replicates with unary Replicate RPCs instead, and its decisions stay
// exact.
func TestForwardFallsBackToUnary(t *testing.T) {
	c := testcluster.New(t, 2)
	v := c.ApplyRules(checkRules)

	// Every peer link of the node started below reaches a legacy front
	// of the peer instead of the peer itself.
	legacy := map[string]*legacyPeer{} // by the real peer's gRPC address
	fronts := map[string]string{}      // real gRPC address -> legacy front's
	for _, nd := range c.Nodes {
		lp := &legacyPeer{}
		fronts[nd.GRPCAddr()] = testcluster.Front(t, nd.GRPCAddr(), func(s *grpc.Server, to *grpc.ClientConn) {
			lp.real = weirv1.NewPeerClient(to)
			weirv1.RegisterPeerServer(s, lp)
		})
		legacy[nd.GRPCAddr()] = lp
	}
	cfg := testcluster.Config(t, "n3")
	cfg.Join = []string{c.Nodes[0].GossipAddr()}
	cfg.PeerDialer = func(ctx context.Context, addr string) (net.Conn, error) {
		if front, ok := fronts[addr]; ok {
			addr = front
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	entry := c.Start(cfg)
	c.WaitStable(3)
	testwait.For(t, 10*time.Second, "the rules on the new node", func() error {
		if s := entry.Store().Current(); s == nil || s.Version < v {
			return fmt.Errorf("n3 has not applied version %d yet", v)
		}
		return nil
	})
	local, remote := keysByOwner(t, entry)

	for round := 0; round < 5; round++ {
		res := make([]limit.Result, 1)
		if err := entry.Check(context.Background(), []limit.Item{{Key: remote, Rule: "three", Cost: 1}}, res); err != nil {
			t.Fatal(err)
		}
		if want := round < 3; res[0].Code != limit.CodeNone || res[0].Allowed != want {
			t.Fatalf("round %d: %v, want allowed=%v", round, res[0], want)
		}
	}
	var forwards int64
	for _, lp := range legacy {
		forwards += lp.forwards.Load()
	}
	if forwards < 5 {
		t.Fatalf("legacy peers saw %d unary Forward RPCs for 5 forwarded checks", forwards)
	}

	// n3's own decisions reach its replica through the legacy front.
	if err := entry.Check(context.Background(), []limit.Item{{Key: local, Rule: "three", Cost: 1}}, make([]limit.Result, 1)); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a unary Replicate RPC at a legacy peer", func() bool {
		for _, lp := range legacy {
			if lp.replicates.Load() > 0 {
				return true
			}
		}
		return false
	})
}

// A member that leaves takes its forwarder (senders and streams) with it;
// checks go on through the members that stay.
func TestForwarderPrunedWhenMemberLeaves(t *testing.T) {
	c := testcluster.New(t, 3)
	c.ApplyRules(checkRules)
	entry, leaver := c.Nodes[0], c.Nodes[2]
	r := memberRing(t, entry)
	// Keys the leaver owns: entry forwards them to it (or, for partitions
	// the leaver took from n2, to n2, which names it). 300 keys reach it
	// directly with certainty for all practical purposes.
	var keys []string
	for k := 0; k < 100_000 && len(keys) < 300; k++ {
		if key := fmt.Sprintf("apikey:f%d", k); r.Owner(key) == leaver.ID() {
			keys = append(keys, key)
		}
	}
	check := func() {
		t.Helper()
		items := make([]limit.Item, len(keys))
		for i, key := range keys {
			items[i] = limit.Item{Key: key, Rule: "three", Cost: 1}
		}
		res := make([]limit.Result, len(items))
		if err := entry.Check(context.Background(), items, res); err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Code != limit.CodeNone {
				t.Fatalf("check of %s: %v", keys[i], r)
			}
		}
	}
	check()
	before := metricValue(t, entry.HTTPAddr(), "weir_forward_destinations")
	if before != "1" && before != "2" {
		t.Fatalf("weir_forward_destinations = %s, want 1 or 2", before)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := leaver.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	c.Kill(2)
	want := "0"
	if before == "2" {
		want = "1"
	}
	testwait.For(t, 10*time.Second, "the departed member's forwarder to go", func() error {
		if got := metricValue(t, entry.HTTPAddr(), "weir_forward_destinations"); got != want {
			return fmt.Errorf("weir_forward_destinations = %s, want %s", got, want)
		}
		return nil
	})
	check()
}

// metricValue is the value of an unlabelled metric on a node's /metrics.
func metricValue(t *testing.T, addr, name string) string {
	t.Helper()
	for _, line := range strings.Split(scrape(t, addr), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return ""
}

// slowPeer is a node's Peer service behind a front that answers
// ForwardStream requests out of order, each relayed to the node as a
// unary Forward: a request holding the key slow waits until release is
// closed, and while a stall is on (a gate) every request waits for it to end.
type slowPeer struct {
	*legacyPeer
	slow    string
	release chan struct{}
	gate    atomic.Pointer[chan struct{}] // set: a stall, over when closed
	opened  atomic.Int64                  // ForwardStreams opened
	ended   atomic.Int64                  // ForwardStreams whose caller went away
	held    atomic.Int64                  // requests holding the slow key received
}

func (p *slowPeer) ForwardStream(st grpc.BidiStreamingServer[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]) error {
	p.opened.Add(1)
	var mu sync.Mutex
	for {
		req, err := st.Recv()
		if err != nil {
			p.ended.Add(1)
			return nil
		}
		go func() {
			if g := p.gate.Load(); g != nil {
				select {
				case <-*g:
				case <-st.Context().Done():
				}
			}
			for _, it := range req.Items {
				if it.Key == p.slow {
					p.held.Add(1)
					select {
					case <-p.release:
					case <-st.Context().Done():
					}
				}
			}
			resp := &weirv1.CheckStreamResponse{Id: req.Id}
			if got, err := p.real.Forward(st.Context(), &weirv1.CheckRequest{Items: req.Items}); err != nil {
				resp.ErrorCode, resp.Error = weirv1.ErrorCode_ERROR_CODE_UNAVAILABLE, err.Error()
			} else {
				resp.Results = got.Results
			}
			mu.Lock()
			defer mu.Unlock()
			_ = st.Send(resp)
		}()
	}
}

// The forward stream's timeout policy: a request past its own deadline
// (ForwardTimeout) is answered unavailable alone while the requests behind
// it are answered, its late answer is dropped by id and the stream goes
// on; a stream that answers nothing for ForwardTimeout is torn down, its
// requests answered unavailable, and the next check opens a fresh one.
func TestForwardStreamTimeouts(t *testing.T) {
	c := testcluster.New(t, 2)
	v := c.ApplyRules(checkRules + `
  - id: many
    match: {route: /m, method: GET}
    key: apikey
    rate: 1000
    period: 1h
    burst: 1000
`)
	var peers []*slowPeer
	fronts := map[string]string{}
	for _, nd := range c.Nodes {
		sp := &slowPeer{legacyPeer: &legacyPeer{}, release: make(chan struct{})}
		fronts[nd.GRPCAddr()] = testcluster.Front(t, nd.GRPCAddr(), func(s *grpc.Server, to *grpc.ClientConn) {
			sp.real = weirv1.NewPeerClient(to)
			weirv1.RegisterPeerServer(s, sp)
		})
		peers = append(peers, sp)
	}
	cfg := testcluster.Config(t, "n3")
	cfg.Join = []string{c.Nodes[0].GossipAddr()}
	cfg.ForwardTimeout = 300 * time.Millisecond
	cfg.PeerDialer = func(ctx context.Context, addr string) (net.Conn, error) {
		if front, ok := fronts[addr]; ok {
			addr = front
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	entry := c.Start(cfg)
	c.WaitStable(3)
	testwait.For(t, 10*time.Second, "the rules on the new node", func() error {
		if s := entry.Store().Current(); s == nil || s.Version < v {
			return fmt.Errorf("n3 has not applied version %d yet", v)
		}
		return nil
	})
	// Two keys of the same owner, not the entry.
	r := memberRing(t, entry)
	var owner, fast, slow string
	for k := 0; k < 10_000 && slow == ""; k++ {
		key := fmt.Sprintf("apikey:s%d", k)
		switch o := r.Owner(key); {
		case o == entry.ID():
		case fast == "":
			owner, fast = o, key
		case o == owner:
			slow = key
		}
	}
	var sp *slowPeer
	for i, nd := range c.Nodes {
		if nd.ID() == owner {
			sp = peers[i]
		}
	}
	for _, p := range peers {
		p.slow = slow
	}
	check := func(key string) limit.Result {
		t.Helper()
		res := make([]limit.Result, 1)
		if err := entry.Check(context.Background(), []limit.Item{{Key: key, Rule: "many", Cost: 1}}, res); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if r := check(fast); r.Code != limit.CodeNone || !r.Allowed {
		t.Fatalf("first check: %v", r)
	}

	// A request past its own deadline fails alone.
	slowRes := make(chan limit.Result, 1)
	go func() {
		res := make([]limit.Result, 1)
		_ = entry.Check(context.Background(), []limit.Item{{Key: slow, Rule: "many", Cost: 1}}, res)
		slowRes <- res[0]
	}()
	testwait.Until(t, "the slow request at the owner", func() bool { return sp.held.Load() > 0 })
	for i := range 5 {
		if r := check(fast); r.Code != limit.CodeNone || !r.Allowed {
			t.Fatalf("check %d behind the slow request: %v", i, r)
		}
	}
	if r := <-slowRes; r.Code != limit.CodeUnavailable || !strings.Contains(r.Err, "no answer within") {
		t.Fatalf("the slow request: %v, want unavailable (no answer within the timeout)", r)
	}
	close(sp.release) // its late answer comes now and is dropped
	for i := range 3 {
		if r := check(fast); r.Code != limit.CodeNone || !r.Allowed {
			t.Fatalf("check %d after the late answer: %v", i, r)
		}
	}
	if got := sp.opened.Load(); got != 1 {
		t.Fatalf("%d forward streams opened to the owner, want 1 (kept through a request's timeout)", got)
	}

	// A stream that answers nothing is torn down.
	gate := make(chan struct{})
	sp.gate.Store(&gate)
	if r := check(fast); r.Code != limit.CodeUnavailable || !strings.Contains(r.Err, "no answer within") {
		t.Fatalf("check on a stalled stream: %v, want unavailable", r)
	}
	testwait.Until(t, "the stalled stream to end", func() bool { return sp.ended.Load() == 1 })
	sp.gate.Store(nil)
	close(gate)
	if r := check(fast); r.Code != limit.CodeNone || !r.Allowed {
		t.Fatalf("check after the stall: %v", r)
	}
	if got := sp.opened.Load(); got != 2 {
		t.Fatalf("%d forward streams opened to the owner, want 2", got)
	}
}

// A forwarded request whose decision waits (here for a rule version the
// owner does not reach within the wait) is decided aside: the request sent after it on the
// same stream is answered first.
func TestForwardStreamWaitingRequestAside(t *testing.T) {
	c := testcluster.New(t, 2)
	v := c.ApplyRules(checkRules)
	owner := c.Nodes[0]
	local, _ := keysByOwner(t, owner)

	cc, err := grpc.NewClient(owner.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	st, err := weirv1.NewPeerClient(cc).ForwardStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []*weirv1.CheckStreamRequest{
		{Id: 1, Items: []*weirv1.CheckItem{{Key: local, Rule: "three", Cost: 1, RuleVersion: v + 1000}}},
		{Id: 2, Items: []*weirv1.CheckItem{{Key: local, Rule: "three", Cost: 1}}},
	} {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	var order []uint64
	for range 2 {
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, resp.Id)
		// Both are decided: request 1 by the rules the owner has once
		// the wait is over (its rule exists there).
		if len(resp.Results) != 1 || resp.Results[0].ErrorCode != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
			t.Fatalf("request %d answered %v", resp.Id, resp)
		}
	}
	if order[0] != 2 {
		t.Fatalf("answers in order %v, want request 2 first", order)
	}
	_ = st.CloseSend()
}
