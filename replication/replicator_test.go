package replication

import (
	"context"
	"errors"
	"fmt"
	"go/build"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirlimit/weir/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errDown = errors.New("link down")

// link stands in for the network between this owner and its replicas: it
// records what each destination received and lets a test make a destination
// fail or hang.
type link struct {
	mu       sync.Mutex
	calls    map[string][][]State // per destination, one entry per successful RPC
	froms    map[string]bool
	attempts map[string]int
	fail     map[string]bool
	hang     map[string]chan struct{} // closed to release
}

func newLink() *link {
	return &link{
		calls: map[string][][]State{}, froms: map[string]bool{}, attempts: map[string]int{},
		fail: map[string]bool{}, hang: map[string]chan struct{}{},
	}
}

func (l *link) Replicate(ctx context.Context, to, from string, states []State) error {
	l.mu.Lock()
	l.attempts[to]++
	hang, fail := l.hang[to], l.fail[to]
	l.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail {
		return errDown
	}
	cp := make([]State, len(states))
	for i, s := range states {
		s.Log = append([]int64(nil), s.Log...)
		cp[i] = s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[to] = append(l.calls[to], cp)
	l.froms[from] = true
	return nil
}

func (l *link) setFail(to string, v bool) { l.mu.Lock(); l.fail[to] = v; l.mu.Unlock() }

func (l *link) attemptsTo(to string) int { l.mu.Lock(); defer l.mu.Unlock(); return l.attempts[to] }

// received returns every state delivered to `to`, in arrival order.
func (l *link) received(to string) []State {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []State
	for _, c := range l.calls[to] {
		out = append(out, c...)
	}
	return out
}

// latest returns the newest state per id delivered to `to`.
func (l *link) latest(to string) map[uint64]State {
	out := map[uint64]State{}
	for _, s := range l.received(to) {
		out[s.ID] = s
	}
	return out
}

func (l *link) rpcs(to string) [][]State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]State(nil), l.calls[to]...)
}

type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// places maps partition -> replicas; fixed for a test unless swapped.
type places struct {
	mu sync.Mutex
	m  map[uint32][]string
}

func (p *places) fn(part uint32) []string { p.mu.Lock(); defer p.mu.Unlock(); return p.m[part] }
func (p *places) set(part uint32, to ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[part] = to
}

func testConfig() Config {
	c := DefaultConfig()
	c.Self = "self"
	c.Interval = time.Millisecond
	c.SendTimeout = 10 * time.Second
	return c
}

func newTestReplicator(t *testing.T, cfg Config, l *link, p *places) *Replicator {
	t.Helper()
	r, err := NewReplicator(cfg, l, p.fn)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs r until the test ends and checks Run returned nil.
func start(t *testing.T, r *Replicator) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run returned %v, want nil", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func st(part uint32, id uint64, a int64) State {
	return State{Partition: part, ID: id, A: a, B: a * 10, C: a * 100}
}

func TestConfigValidate(t *testing.T) {
	ok := testConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if err := DefaultConfig().Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("DefaultConfig without Self: got %v, want ErrInvalidConfig", err)
	}
	for name, mut := range map[string]func(*Config){
		"interval":    func(c *Config) { c.Interval = 0 },
		"maxbatch":    func(c *Config) { c.MaxBatch = 0 },
		"queuelen":    func(c *Config) { c.QueueLen = -1 },
		"sendtimeout": func(c *Config) { c.SendTimeout = 0 },
	} {
		c := ok
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: got %v, want ErrInvalidConfig", name, err)
		}
		if _, err := NewReplicator(c, newLink(), func(uint32) []string { return nil }); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: NewReplicator got %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := NewReplicator(ok, nil, func(uint32) []string { return nil }); !errors.Is(err, ErrNilDependency) {
		t.Errorf("nil transport: got %v", err)
	}
	c := ok
	c.Logger, c.Now = nil, nil
	if _, err := NewReplicator(c, newLink(), func(uint32) []string { return nil }); err != nil {
		t.Errorf("nil Logger/Now should default: %v", err)
	}
}

func TestCoalesceLatestWins(t *testing.T) {
	l, p := newLink(), &places{m: map[uint32][]string{0: {"a"}}}
	r := newTestReplicator(t, testConfig(), l, p)
	r.Enqueue([]State{st(0, 1, 1), st(0, 2, 1)})
	r.Enqueue([]State{st(0, 1, 2)})
	r.Enqueue([]State{st(0, 1, 3), st(0, 2, 7)})
	if got := r.Stats().Pending; got != 2 {
		t.Fatalf("Pending = %d, want 2 (coalesced by id)", got)
	}
	start(t, r)
	testwait.Until(t, "two states at a", func() bool { return len(l.received("a")) >= 2 })
	got := l.received("a")
	if len(got) != 2 {
		t.Fatalf("a received %d states, want exactly 2: %+v", len(got), got)
	}
	want := map[uint64]State{1: st(0, 1, 3), 2: st(0, 2, 7)}
	for _, s := range got {
		if w := want[s.ID]; s.A != w.A || s.B != w.B || s.C != w.C || s.Partition != 0 {
			t.Errorf("id %d: got %+v, want %+v", s.ID, s, w)
		}
	}
	testwait.Until(t, "Pending 0", func() bool { return r.Stats().Pending == 0 })
	if s := r.Stats(); s.Sent != 2 || s.Failed != 0 || s.Dropped != 0 || s.Lag != 0 {
		t.Errorf("stats = %+v, want Sent 2, nothing failed/dropped, no lag", s)
	}
}

func TestBatchesByDestination(t *testing.T) {
	l := newLink()
	p := &places{m: map[uint32][]string{0: {"a", "b"}, 1: {"b", "c"}, 2: {"self", "c"}, 3: nil}}
	cfg := testConfig()
	cfg.MaxBatch = 3
	r := newTestReplicator(t, cfg, l, p)
	var all []State
	for id := uint64(1); id <= 20; id++ {
		all = append(all, st(uint32(id%4), id, int64(id)))
	}
	r.Enqueue(all)
	start(t, r)
	want := map[string]map[uint64]bool{"a": {}, "b": {}, "c": {}}
	for _, s := range all {
		for _, to := range p.m[s.Partition] {
			if to != "self" {
				want[to][s.ID] = true
			}
		}
	}
	for to, ids := range want {
		testwait.Until(t, "delivery to "+to, func() bool { return len(l.latest(to)) == len(ids) })
		for id, s := range l.latest(to) {
			if !ids[id] {
				t.Errorf("%s got id %d (partition %d) it does not replicate", to, id, s.Partition)
			}
		}
		for _, rpc := range l.rpcs(to) {
			if len(rpc) == 0 || len(rpc) > cfg.MaxBatch {
				t.Errorf("%s: RPC with %d states, want 1..%d", to, len(rpc), cfg.MaxBatch)
			}
		}
	}
	if n := len(l.received("self")); n != 0 {
		t.Errorf("self received %d states", n)
	}
	l.mu.Lock()
	froms := l.froms
	l.mu.Unlock()
	if len(froms) != 1 || !froms["self"] {
		t.Errorf("from = %v, want only self", froms)
	}
}

func TestEnqueueFlushesEarlyAtMaxBatch(t *testing.T) {
	l, p := newLink(), &places{m: map[uint32][]string{0: {"a"}}}
	cfg := testConfig()
	cfg.Interval = time.Hour // only the MaxBatch kick can flush
	cfg.MaxBatch = 4
	r := newTestReplicator(t, cfg, l, p)
	start(t, r)
	r.Enqueue([]State{st(0, 1, 1), st(0, 2, 1), st(0, 3, 1)})
	r.Enqueue([]State{st(0, 4, 1)})
	testwait.Until(t, "early flush", func() bool { return len(l.received("a")) == 4 })
}

func TestFailingDestinationDoesNotBlockOthers(t *testing.T) {
	l := newLink()
	p := &places{m: map[uint32][]string{0: {"a", "hung", "down"}}}
	hang := make(chan struct{}) // hung never answers until the test ends
	defer close(hang)
	held := make(chan struct{}) // down's first send is held, then refused
	l.hang["hung"], l.hang["down"] = hang, held
	l.setFail("down", true)
	r := newTestReplicator(t, testConfig(), l, p)
	start(t, r)

	r.Enqueue([]State{st(0, 1, 1), st(0, 2, 1)})
	testwait.Until(t, "a to get v1", func() bool { return len(l.latest("a")) == 2 })
	testwait.Until(t, "down's send in flight", func() bool { return l.attemptsTo("down") == 1 })
	// Newer states while down's send is stuck: a keeps up, down queues them.
	r.Enqueue([]State{st(0, 1, 2)})
	testwait.Until(t, "a to get v2", func() bool { return l.latest("a")[1].A == 2 })
	close(held) // down refuses v1 while v2 waits: v2 must win the retry
	testwait.Until(t, "down's retry", func() bool { return l.attemptsTo("down") >= 2 })
	if n := l.attemptsTo("hung"); n != 1 {
		t.Errorf("hung got %d attempts, want 1 (one in flight per destination)", n)
	}
	if s := r.Stats(); s.Failed == 0 || s.Pending == 0 {
		t.Errorf("stats %+v: want failures counted and states pending", s)
	}

	l.setFail("down", false)
	testwait.Until(t, "down to catch up", func() bool { return len(l.latest("down")) == 2 })
	got := l.received("down")
	for _, s := range got {
		if s.ID == 1 && s.A != 2 {
			t.Errorf("down received stale id 1 (A=%d); want only the newest (2)", s.A)
		}
	}
	if len(got) != 2 {
		t.Errorf("down received %d states, want 2 (newest per id only): %+v", len(got), got)
	}
	testwait.Until(t, "LastSuccess for down", func() bool { _, ok := r.Stats().LastSuccess["down"]; return ok })
	if _, ok := r.Stats().LastSuccess["hung"]; ok {
		t.Error("LastSuccess for hung, which never answered")
	}
}

func TestRefusedStatesForgottenWhenPartitionMoves(t *testing.T) {
	l := newLink()
	p := &places{m: map[uint32][]string{0: {"a", "down"}}}
	l.setFail("down", true)
	r := newTestReplicator(t, testConfig(), l, p)
	start(t, r)
	r.Enqueue([]State{st(0, 1, 1)})
	testwait.Until(t, "a failed attempt", func() bool { return l.attemptsTo("down") >= 1 })
	if r.Stats().Pending == 0 {
		t.Fatal("refused state not pending")
	}
	p.set(0, "a", "new")
	testwait.Until(t, "refused state dropped after the move", func() bool { return r.Stats().Pending == 0 })
	if s := r.Stats(); s.Lag != 0 {
		t.Errorf("Lag %v after the refused state was forgotten", s.Lag)
	}
	n := l.attemptsTo("down")
	r.Enqueue([]State{st(0, 2, 1)})
	testwait.Until(t, "new replica served", func() bool { return len(l.latest("new")) == 1 })
	if got := l.attemptsTo("down"); got != n {
		t.Errorf("down got %d more attempts after it stopped being a replica", got-n)
	}
}

func TestEnqueueBoundedWithoutRun(t *testing.T) {
	l, p := newLink(), &places{m: map[uint32][]string{0: {"a"}}}
	cfg := testConfig()
	cfg.QueueLen = 4
	r := newTestReplicator(t, cfg, l, p)
	for id := uint64(1); id <= 10; id++ {
		r.Enqueue([]State{st(0, id, int64(id))}) // would hang here if Enqueue could block
	}
	r.Enqueue([]State{st(0, 8, 80)}) // coalesces: no eviction
	if s := r.Stats(); s.Pending != 4 || s.Dropped != 6 {
		t.Fatalf("stats %+v, want Pending 4, Dropped 6", s)
	}
	start(t, r)
	testwait.Until(t, "the newest four", func() bool { return len(l.received("a")) >= 4 })
	got := l.latest("a")
	if len(got) != 4 || got[7].A != 7 || got[8].A != 80 || got[9].A != 9 || got[10].A != 10 {
		t.Errorf("a got %+v, want ids 7..10 with 8 coalesced to 80", got)
	}
}

func TestDestinationQueueBounded(t *testing.T) {
	l := newLink()
	p := &places{m: map[uint32][]string{0: {"down"}}}
	l.setFail("down", true)
	cfg := testConfig()
	cfg.QueueLen = 3
	r := newTestReplicator(t, cfg, l, p)
	start(t, r)
	for id := uint64(1); id <= 3; id++ {
		r.Enqueue([]State{st(0, id, 1)})
	}
	testwait.Until(t, "a failed attempt", func() bool { return l.attemptsTo("down") >= 1 })
	for id := uint64(4); id <= 9; id++ {
		r.Enqueue([]State{st(0, id, 1)})
		testwait.Until(t, "flush", func() bool { return r.Stats().Pending <= 3 })
	}
	testwait.Until(t, "drops counted", func() bool { return r.Stats().Dropped >= 6 })
	if s := r.Stats(); s.Pending > 3 {
		t.Errorf("Pending %d beyond QueueLen 3", s.Pending)
	}
}

func TestLag(t *testing.T) {
	l := newLink()
	p := &places{m: map[uint32][]string{0: {"a", "down"}}}
	clk := newClock()
	cfg := testConfig()
	cfg.Now = clk.Now
	held := make(chan struct{}) // down's first send is held, then refused
	l.hang["down"] = held
	l.setFail("down", true)
	r := newTestReplicator(t, cfg, l, p)
	if lag := r.Stats().Lag; lag != 0 {
		t.Fatalf("idle Lag = %v", lag)
	}
	r.Enqueue([]State{st(0, 1, 1)})
	clk.Advance(time.Second)
	if lag := r.Stats().Lag; lag != time.Second {
		t.Fatalf("Lag before Run = %v, want 1s", lag)
	}
	start(t, r)
	testwait.Until(t, "a served, down in flight", func() bool { return len(l.latest("a")) == 1 && l.attemptsTo("down") == 1 })
	clk.Advance(2 * time.Second)
	if lag := r.Stats().Lag; lag != 3*time.Second {
		t.Fatalf("Lag while down's send is stuck = %v, want 3s", lag)
	}
	r.Enqueue([]State{st(0, 1, 2)}) // queued for down behind the stuck send
	testwait.Until(t, "a gets v2", func() bool { return l.latest("a")[1].A == 2 })
	clk.Advance(time.Second)
	close(held) // v1 is refused; v2 replaces it, but the change of T0 is still unshipped
	testwait.Until(t, "down's retry refused", func() bool { return l.attemptsTo("down") >= 3 })
	if lag := r.Stats().Lag; lag != 4*time.Second {
		t.Fatalf("Lag after a refused send and a newer change = %v, want 4s", lag)
	}
	l.setFail("down", false)
	testwait.Until(t, "Lag back to 0", func() bool { return r.Stats().Lag == 0 })
	s := r.Stats()
	if got := s.LastSuccess["down"]; !got.Equal(clk.Now()) {
		t.Errorf("LastSuccess[down] = %v, want %v", got, clk.Now())
	}
	if l.latest("down")[1].A != 2 {
		t.Errorf("down has %+v, want A=2", l.latest("down")[1])
	}
}

func TestRunExitsOnCancel(t *testing.T) {
	defer goleak.VerifyNone(t)
	l, p := newLink(), &places{m: map[uint32][]string{0: {"a", "hung"}}}
	hang := make(chan struct{}) // never closed: only ctx cancel frees the send
	l.hang["hung"] = hang
	r := newTestReplicator(t, testConfig(), l, p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	r.Enqueue([]State{st(0, 1, 1)})
	testwait.Until(t, "send to hung in flight", func() bool { return l.attemptsTo("hung") == 1 })
	// a's copy acknowledged (acks are asked for every AckInterval): only
	// the hung send is left to fail at the cancel.
	testwait.Until(t, "a's copy acknowledged", func() bool { return r.Stats().Sent == 1 })
	if err := r.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Errorf("second Run: %v, want ErrRunning", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if s := r.Stats(); s.Failed != 1 || s.Pending != 1 {
		t.Errorf("after cancel: %+v, want the cancelled send failed and still pending", s)
	}
	// Run may run again and delivers what was left.
	l.mu.Lock()
	delete(l.hang, "hung")
	l.mu.Unlock()
	stop := start(t, r)
	testwait.Until(t, "hung served after restart", func() bool { return len(l.latest("hung")) == 1 })
	stop()
}

func TestEnqueueCopiesLog(t *testing.T) {
	l, p := newLink(), &places{m: map[uint32][]string{0: {"a"}}}
	r := newTestReplicator(t, testConfig(), l, p)
	in := []State{{Partition: 0, ID: 1, Log: []int64{1, 2, 3}}}
	r.Enqueue(in)
	in[0].Log[0] = 99
	in[0].ID = 2
	start(t, r)
	testwait.Until(t, "delivery", func() bool { return len(l.received("a")) == 1 })
	got := l.received("a")[0]
	if got.ID != 1 || len(got.Log) != 3 || got.Log[0] != 1 {
		t.Errorf("got %+v, want the state as enqueued", got)
	}
}

func TestConcurrentEnqueue(t *testing.T) {
	l, p := newLink(), &places{m: map[uint32][]string{0: {"a", "b"}, 1: {"b"}}}
	cfg := testConfig()
	cfg.MaxBatch = 16
	r := newTestReplicator(t, cfg, l, p)
	start(t, r)
	const shards, ids, rounds = 4, 50, 200
	var wg sync.WaitGroup
	for s := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]State, 0, ids)
			for round := 1; round <= rounds; round++ {
				batch = batch[:0]
				for i := range ids {
					id := uint64(s*ids + i)
					batch = append(batch, State{Partition: uint32(id % 2), ID: id, A: int64(round), Log: []int64{int64(round)}})
				}
				r.Enqueue(batch)
				batch[0].Log[0] = -1 // the caller reuses its memory
			}
		}()
	}
	wg.Wait()
	testwait.Until(t, "all shipped", func() bool { return r.Stats().Pending == 0 })
	for _, to := range []string{"a", "b"} {
		for id, s := range l.latest(to) {
			if s.A != rounds || s.Log[0] != rounds {
				t.Errorf("%s id %d: final A=%d Log=%v, want %d", to, id, s.A, s.Log, rounds)
			}
		}
	}
	if n := len(l.latest("b")); n != shards*ids {
		t.Errorf("b has %d ids, want %d", n, shards*ids)
	}
	if n := len(l.latest("a")); n != shards*ids/2 {
		t.Errorf("a has %d ids, want %d", n, shards*ids/2)
	}
}

// TestImports keeps the package below node and rulesraft in the dependency
// order: the standard library, the seam (internal/sched) and the
// re-inserted defects' switches (internal/bug) only.
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.Contains(imp, ".") && imp != "github.com/weirlimit/weir/internal/sched" && imp != "github.com/weirlimit/weir/internal/bug" {
			t.Errorf("replication imports %s; it must depend only on the standard library, internal/sched and internal/bug", imp)
		}
	}
}

func BenchmarkEnqueue(b *testing.B) {
	for _, size := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			p := &places{m: map[uint32][]string{0: {"a", "b"}, 1: {"b", "c"}}}
			r, err := NewReplicator(testConfig(), discard{}, p.fn)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			batch := make([]State, size)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				for j := range batch {
					id := uint64(i*size+j) % (1 << 16)
					batch[j] = State{Partition: uint32(id & 1), ID: id, A: int64(i)}
				}
				r.Enqueue(batch)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/state")
			cancel()
			<-done
		})
	}
}

type discard struct{}

func (discard) Replicate(context.Context, string, string, []State) error { return nil }
