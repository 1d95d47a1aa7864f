package forward_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/node/forward"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// fakePeer is another node's Peer service, outside the package under
// test: it answers each item with Allowed unless its key is "deny" and
// Remaining set to its cost, and records what it got. A request holding
// the key slow waits until release is closed; while a gate is set, every
// request waits for it to close. Its answers to a stream go out of order,
// each request on its own goroutine. With legacy set it predates
// ForwardStream and answers it Unimplemented.
type fakePeer struct {
	weirv1.UnimplementedPeerServer
	addr       string
	legacy     bool
	slow       string
	release    chan struct{}
	gate       atomic.Pointer[chan struct{}] // set: a stall, over when closed
	short      atomic.Bool                   // answer one result too few
	unrecorded bool                          // keep no items (a benchmark's peer)

	opened atomic.Int64 // ForwardStreams opened
	ended  atomic.Int64 // ForwardStreams whose caller went away
	held   atomic.Int64 // requests holding the slow key received
	unary  atomic.Int64 // unary Forward RPCs
	mu     sync.Mutex
	got    []*weirv1.CheckItem // every item received
}

func startPeer(t testing.TB, p *fakePeer) *fakePeer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if p.release == nil {
		p.release = make(chan struct{})
	}
	s := grpc.NewServer()
	weirv1.RegisterPeerServer(s, p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	p.addr = lis.Addr().String()
	return p
}

// decide answers one request's items (after the gate and the slow key).
func (p *fakePeer) decide(ctx context.Context, items []*weirv1.CheckItem) []*weirv1.CheckResult {
	if g := p.gate.Load(); g != nil {
		select {
		case <-*g:
		case <-ctx.Done():
		}
	}
	if !p.unrecorded {
		p.mu.Lock()
		p.got = append(p.got, items...)
		p.mu.Unlock()
	}
	out := make([]*weirv1.CheckResult, 0, len(items))
	for _, it := range items {
		if p.slow != "" && it.Key == p.slow {
			p.held.Add(1)
			select {
			case <-p.release:
			case <-ctx.Done():
			}
		}
		out = append(out, &weirv1.CheckResult{Allowed: it.Key != "deny", Remaining: it.Cost})
	}
	if p.short.Load() && len(out) > 0 {
		out = out[1:]
	}
	return out
}

func (p *fakePeer) Forward(ctx context.Context, req *weirv1.CheckRequest) (*weirv1.CheckResponse, error) {
	p.unary.Add(1)
	return &weirv1.CheckResponse{Results: p.decide(ctx, req.Items)}, nil
}

func (p *fakePeer) ForwardStream(st grpc.BidiStreamingServer[weirv1.CheckStreamRequest, weirv1.CheckStreamResponse]) error {
	if p.legacy {
		return status.Error(codes.Unimplemented, "no ForwardStream here")
	}
	p.opened.Add(1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		req, err := st.Recv()
		if err != nil {
			p.ended.Add(1)
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := &weirv1.CheckStreamResponse{Id: req.Id, Results: p.decide(st.Context(), req.Items)}
			mu.Lock()
			defer mu.Unlock()
			_ = st.Send(resp)
		}()
	}
}

// members resolves ids to the fake peers' addresses.
type members map[string]string

func (m members) PeerAddr(id string) (string, error) {
	if a, ok := m[id]; ok {
		return a, nil
	}
	return "", limit.Errorf(limit.ErrUnavailable, "unknown member %q", id)
}

func newTable(t *testing.T, m members, timeout time.Duration) *forward.Table {
	t.Helper()
	tb, err := forward.New(context.Background(), forward.Config{
		Self: "self", Members: m, Timeout: timeout, MaxBatch: 64, Inflight: 2,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tb.Close)
	return tb
}

// check forwards items[idx] to dest and waits for the answer.
func check(tb *forward.Table, dest string, items []limit.Item, idx []int, res []limit.Result) error {
	return tb.Start(context.Background(), dest, items, idx, 0, false).Wait(context.Background(), res)
}

// Many callers at once: each gets its own results at its own positions
// (the others untouched), however the forwarder coalesced them; the peer
// got every item with the rule version and hop count the caller set, and
// fewer requests than calls.
func TestStartWaitAnswersEachCaller(t *testing.T) {
	p := startPeer(t, &fakePeer{})
	tb := newTable(t, members{"p": p.addr}, 5*time.Second)
	const callers, rounds = 16, 30
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				items := []limit.Item{
					{Key: "local", Rule: "r", Cost: 99},
					{Key: fmt.Sprintf("k%d-%d", c, r), Rule: "r", Cost: int64(c*rounds + r + 1), Hops: 3},
					{Key: "deny", Rule: "r", Cost: 1, RuleVersion: 9},
				}
				res := make([]limit.Result, 3)
				res[0].Err = "untouched"
				if err := tb.Start(context.Background(), "p", items, []int{1, 2}, 5, true).Wait(context.Background(), res); err != nil {
					errs <- err
					return
				}
				if res[0].Err != "untouched" || !res[1].Allowed || res[1].Remaining != items[1].Cost || res[2].Allowed || res[2].Remaining != 1 {
					errs <- fmt.Errorf("caller %d round %d: %+v", c, r, res)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.got) != 2*callers*rounds {
		t.Fatalf("peer got %d items, want %d", len(p.got), 2*callers*rounds)
	}
	for _, it := range p.got {
		if it.Key == "local" {
			t.Fatal("an item outside idx was sent")
		}
		want := struct{ ver, hops uint64 }{5, 1}
		if it.Key == "deny" {
			want.ver = 9
		} else {
			want.hops = 4
		}
		if it.RuleVersion != want.ver || uint64(it.Hops) != want.hops {
			t.Fatalf("item %s arrived with version %d hops %d, want %d and %d", it.Key, it.RuleVersion, it.Hops, want.ver, want.hops)
		}
	}
	if got := p.opened.Load(); got != 1 {
		t.Errorf("%d streams opened, want 1", got)
	}
	if tb.Len() != 1 {
		t.Errorf("Len() = %d, want 1", tb.Len())
	}
}

// The forward stream's timeout policy: a request past its own deadline is
// answered unavailable alone while the requests behind it are answered,
// its late answer is dropped by id and the stream goes on; a stream that
// answers nothing for the timeout is torn down, its requests fail, and the
// next call opens a fresh one.
func TestForwardStreamTimeouts(t *testing.T) {
	p := startPeer(t, &fakePeer{slow: "slow"})
	tb := newTable(t, members{"p": p.addr}, 300*time.Millisecond)
	one := func(key string) (limit.Result, error) {
		res := make([]limit.Result, 1)
		err := check(tb, "p", []limit.Item{{Key: key, Rule: "r", Cost: 1}}, []int{0}, res)
		return res[0], err
	}
	if r, err := one("fast"); err != nil || !r.Allowed {
		t.Fatalf("first call: %v %v", r, err)
	}

	// A request past its own deadline fails alone.
	slowErr := make(chan error, 1)
	go func() {
		_, err := one("slow")
		slowErr <- err
	}()
	testwait.Until(t, "the slow request at the peer", func() bool { return p.held.Load() > 0 })
	// Calls behind it are answered until it fails (the stream keeps
	// answering, so it is not stalled).
	var err error
	for i, done := 0, false; !done; i++ {
		select {
		case err = <-slowErr:
			done = true
		default:
			if r, err := one("fast"); err != nil || !r.Allowed {
				t.Fatalf("call %d behind the slow request: %v %v", i, r, err)
			}
		}
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within") {
		t.Fatalf("the slow request: %v, want no answer within the timeout", err)
	}
	close(p.release) // its late answer comes now and is dropped
	for i := range 3 {
		if r, err := one("fast"); err != nil || !r.Allowed {
			t.Fatalf("call %d after the late answer: %v %v", i, r, err)
		}
	}
	if got := p.opened.Load(); got != 1 {
		t.Fatalf("%d streams opened, want 1 (kept through a request's timeout); %d ended", got, p.ended.Load())
	}

	// A stream that answers nothing is torn down.
	gate := make(chan struct{})
	p.gate.Store(&gate)
	if _, err := one("fast"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call on a stalled stream: %v, want a deadline", err)
	}
	testwait.Until(t, "the stalled stream to end", func() bool { return p.ended.Load() == 1 })
	p.gate.Store(nil)
	close(gate)
	if r, err := one("fast"); err != nil || !r.Allowed {
		t.Fatalf("call after the stall: %v %v", r, err)
	}
	if got := p.opened.Load(); got != 2 {
		t.Fatalf("%d streams opened, want 2", got)
	}
}

// A peer without ForwardStream gets unary Forward RPCs, and the answers
// are the same.
func TestUnaryFallback(t *testing.T) {
	p := startPeer(t, &fakePeer{legacy: true})
	tb := newTable(t, members{"p": p.addr}, 5*time.Second)
	for i := range 4 {
		res := make([]limit.Result, 2)
		items := []limit.Item{{Key: "a", Rule: "r", Cost: int64(i + 1)}, {Key: "deny", Rule: "r", Cost: 1}}
		if err := check(tb, "p", items, []int{0, 1}, res); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !res[0].Allowed || res[0].Remaining != int64(i+1) || res[1].Allowed {
			t.Fatalf("call %d: %+v", i, res)
		}
	}
	if got := p.unary.Load(); got < 4 {
		t.Fatalf("%d unary Forward RPCs for 4 calls", got)
	}
}

// An answer with the wrong number of results fails its calls and drops
// the stream; the next call opens a fresh one.
func TestMalformedAnswerDropsStream(t *testing.T) {
	p := startPeer(t, &fakePeer{})
	tb := newTable(t, members{"p": p.addr}, 5*time.Second)
	items := []limit.Item{{Key: "a", Rule: "r", Cost: 1}, {Key: "b", Rule: "r", Cost: 1}}
	p.short.Store(true)
	if err := check(tb, "p", items, []int{0, 1}, make([]limit.Result, 2)); err == nil || !strings.Contains(err.Error(), "answered 1 results for 2 items") {
		t.Fatalf("short answer: %v", err)
	}
	p.short.Store(false)
	res := make([]limit.Result, 2)
	if err := check(tb, "p", items, []int{0, 1}, res); err != nil || !res[1].Allowed {
		t.Fatalf("after the short answer: %v %+v", err, res)
	}
	if got := p.opened.Load(); got != 2 {
		t.Fatalf("%d streams opened, want 2", got)
	}
}

// Pruning a member fails the calls waiting on it (unavailable: it left)
// and drops its forwarder; a call to a member not in the view, a call
// whose context ended and a call after Close fail without reaching a
// peer.
func TestPruneUnknownAndClosed(t *testing.T) {
	p := startPeer(t, &fakePeer{slow: "slow"})
	tb := newTable(t, members{"p": p.addr}, 5*time.Second)
	waiting := make(chan error, 1)
	go func() {
		waiting <- check(tb, "p", []limit.Item{{Key: "slow", Rule: "r"}}, []int{0}, make([]limit.Result, 1))
	}()
	testwait.Until(t, "the slow request at the peer", func() bool { return p.held.Load() > 0 })
	tb.Prune(func(id string) bool { return id != "p" })
	if err := <-waiting; !errors.Is(err, limit.ErrUnavailable) || !strings.Contains(err.Error(), "left the cluster") {
		t.Fatalf("call to a pruned member: %v", err)
	}
	if tb.Len() != 0 {
		t.Fatalf("Len() = %d after the prune, want 0", tb.Len())
	}
	close(p.release)

	if err := check(tb, "ghost", []limit.Item{{Key: "a", Rule: "r"}}, []int{0}, make([]limit.Result, 1)); !errors.Is(err, limit.ErrUnavailable) {
		t.Fatalf("call to an unknown member: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tb.Start(ctx, "p", []limit.Item{{Key: "a", Rule: "r"}}, []int{0}, 0, false).Wait(context.Background(), make([]limit.Result, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("call with an ended context: %v", err)
	}
	tb.Close()
	if err := check(tb, "p", []limit.Item{{Key: "a", Rule: "r"}}, []int{0}, make([]limit.Result, 1)); !errors.Is(err, forward.ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

// A bad config is refused with a clear error.
func TestNewRefusesBadConfig(t *testing.T) {
	for _, cfg := range []forward.Config{
		{Timeout: time.Second, MaxBatch: 1, Inflight: 1},
		{Members: members{}, MaxBatch: 1, Inflight: 1},
		{Members: members{}, Timeout: time.Second, Inflight: 1},
		{Members: members{}, Timeout: time.Second, MaxBatch: 1},
	} {
		if tb, err := forward.New(context.Background(), cfg); err == nil {
			tb.Close()
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// BenchmarkStartWait is one item a call through a Table to a fake peer on
// loopback, with 1 and 16 callers per core: the forwarder's own cost
// (coalescing, the stream, conversion) without a node's decision.
func BenchmarkStartWait(b *testing.B) {
	p := startPeer(b, &fakePeer{unrecorded: true})
	tb, err := forward.New(context.Background(), forward.Config{
		Self: "self", Members: members{"p": p.addr}, Timeout: 5 * time.Second, MaxBatch: 1024, Inflight: 4,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("parallelism=%d", callers), func(b *testing.B) {
			b.SetParallelism(callers)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				items, res := []limit.Item{{Key: "k", Rule: "r", Cost: 1}}, make([]limit.Result, 1)
				for pb.Next() {
					if err := check(tb, "p", items, []int{0}, res); err != nil || !res[0].Allowed {
						b.Errorf("%v %+v", err, res[0])
						return
					}
				}
			})
		})
	}
}
