package rulesraft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirlimit/weir/rulesraft/rules"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor polls cond until it returns nil or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond) // poll interval, not a wait for an outcome
	}
}

func testConfig(t *testing.T, id string) Config {
	cfg := DefaultConfig()
	cfg.ID = id
	cfg.DataDir = t.TempDir()
	cfg.HeartbeatTimeout = 300 * time.Millisecond
	cfg.ElectionTimeout = 300 * time.Millisecond
	cfg.LeaderLeaseTimeout = 150 * time.Millisecond
	cfg.ApplyTimeout = 3 * time.Second
	if os.Getenv("RULESRAFT_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return cfg
}

type cluster struct {
	t      *testing.T
	stores []*Store
	cfgs   []Config
}

// newCluster opens n stores and bootstraps them as one group of voters.
func newCluster(t *testing.T, n int, tweak func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t}
	for i := range n {
		cfg := testConfig(t, fmt.Sprintf("n%d", i))
		if tweak != nil {
			tweak(&cfg)
		}
		c.open(cfg)
	}
	var servers []Server
	for _, s := range c.stores {
		servers = append(servers, Server{ID: s.ID(), Addr: s.Addr()})
	}
	if err := c.stores[0].Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	c.leader()
	return c
}

func (c *cluster) open(cfg Config) *Store {
	c.t.Helper()
	s, err := Open(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = s.Close() })
	cfg.BindAddr = s.Addr() // a reopen must come back at the same address
	c.stores = append(c.stores, s)
	c.cfgs = append(c.cfgs, cfg)
	return s
}

func (c *cluster) live() []*Store {
	var out []*Store
	for _, s := range c.stores {
		if !s.isClosed() {
			out = append(out, s)
		}
	}
	return out
}

// leader waits until exactly one live store leads and the others agree.
func (c *cluster) leader() *Store {
	c.t.Helper()
	var l *Store
	waitFor(c.t, 10*time.Second, "a leader", func() error {
		l = nil
		for _, s := range c.live() {
			if s.IsLeader() {
				if l != nil {
					return errors.New("two leaders")
				}
				l = s
			}
		}
		if l == nil {
			return errors.New("no leader")
		}
		for _, s := range c.live() {
			if id, _ := s.Leader(); id != l.ID() {
				return fmt.Errorf("%s thinks the leader is %q", s.ID(), id)
			}
		}
		return nil
	})
	return l
}

func hasRule(s *rules.Set, id string) bool {
	_, ok := s.Rule(id)
	return ok
}

func TestClusterReplicationFailoverAndMinority(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := context.Background()
	leader := c.leader()

	v, err := leader.Apply(ctx, Command{Op: OpApply, Rules: []rules.Rule{rule("a", 5)}, Author: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if cur := leader.Current(); cur.Version != v || !hasRule(cur, "a") {
		t.Fatalf("leader current = %+v after acknowledged write %d", cur, v)
	}
	if h := leader.History(1); len(h) != 1 || h[0].Author != "ann" || h[0].At.IsZero() {
		t.Fatalf("history = %+v", h)
	}
	for _, s := range c.stores {
		waitFor(t, 5*time.Second, "replication to "+s.ID(), func() error {
			if s.Current().Version != v {
				return fmt.Errorf("version %d", s.Current().Version)
			}
			return nil
		})
		if !reflect.DeepEqual(s.Current(), leader.Current()) {
			t.Fatalf("%s differs from leader", s.ID())
		}
	}

	// Followers refuse writes and point at the leader.
	for _, s := range c.stores {
		if s == leader {
			continue
		}
		_, err := s.Apply(ctx, Command{Op: OpApply, Rules: []rules.Rule{rule("x", 1)}})
		if !errors.Is(err, ErrNotLeader) {
			t.Fatalf("follower Apply err = %v", err)
		}
		if id, addr := s.Leader(); id != leader.ID() || addr != leader.Addr() {
			t.Fatalf("follower sees leader %s@%s", id, addr)
		}
		if s.State() != "follower" {
			t.Fatalf("state = %s", s.State())
		}
	}
	// A rejected command reaches the caller and changes nothing anywhere.
	if _, err := leader.Apply(ctx, Command{Op: OpDeleteRule, ID: "nope"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete unknown: %v", err)
	}

	acked := []string{"a"}
	write := func(s *Store, id string) {
		t.Helper()
		if _, err := s.Apply(ctx, Command{Op: OpApply, Rules: []rules.Rule{rule(id, 1)}}); err != nil {
			t.Fatalf("write %s: %v", id, err)
		}
		acked = append(acked, id)
	}
	for i := range 5 {
		write(leader, fmt.Sprintf("before-%d", i))
	}

	// Kill the leader; a new one takes over and keeps accepting writes.
	stopped := time.Now()
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	if leader.State() != "shutdown" {
		t.Fatalf("closed store state %s", leader.State())
	}
	if _, err := leader.Apply(ctx, Command{Op: OpNoop}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply on closed store: %v", err)
	}
	var next *Store
	waitFor(t, 10*time.Second, "a new leader", func() error {
		for _, s := range c.live() {
			if s.IsLeader() {
				next = s
				return nil
			}
		}
		return errors.New("none yet")
	})
	t.Logf("leader failover: %s from leader stop to a new leader", time.Since(stopped).Round(time.Millisecond))
	for i := range 5 {
		write(next, fmt.Sprintf("after-%d", i))
	}
	// No acknowledged write is lost on either survivor.
	want := next.Current().Version
	for _, s := range c.live() {
		waitFor(t, 5*time.Second, "catch-up on "+s.ID(), func() error {
			if s.Current().Version < want {
				return fmt.Errorf("at %d, want %d", s.Current().Version, want)
			}
			return nil
		})
		for _, id := range acked {
			if !hasRule(s.Current(), id) {
				t.Fatalf("%s lost acknowledged rule %s", s.ID(), id)
			}
		}
	}

	// Isolate the last member: alone it is a minority and cannot commit.
	last := c.live()[1]
	if err := c.live()[0].Close(); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = last.Apply(actx, Command{Op: OpApply, Rules: []rules.Rule{rule("minority", 1)}})
	if err == nil {
		t.Fatalf("a single member of three committed a write")
	}
	if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrTimeout) {
		t.Fatalf("minority Apply err = %v, want ErrNotLeader or ErrTimeout", err)
	}
	if hasRule(last.Current(), "minority") {
		t.Fatalf("uncommitted rule applied")
	}
	waitFor(t, 5*time.Second, "the minority to step down", func() error {
		if last.IsLeader() {
			return errors.New("still leader")
		}
		return nil
	})
	t.Logf("minority write failed with: %v", err)
}

func TestReopenKeepsRulesOverridesAndHistory(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.TrailingLogs = 2 })
	ctx := context.Background()
	l := c.leader()
	must := func(cmd Command) uint64 {
		t.Helper()
		v, err := l.Apply(ctx, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v1 := must(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 1), rule("b", 2)}, Author: "ann"})
	must(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "a", Key: "ak_1", Rate: 9}})
	must(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "b", Key: "ak_2", Block: true, ExpiresAt: time.Now().Add(24 * time.Hour)}})
	// Snapshot the leader mid-way, so it restarts from snapshot + log while
	// the others replay the whole log.
	if err := l.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	must(Command{Op: OpApply, Rules: []rules.Rule{rule("c", 3)}})
	must(Command{Op: OpRollback, Version: v1, Author: "bob"})
	last := must(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "b", Key: "ak_3", Rate: 7}})
	for _, s := range c.stores {
		waitFor(t, 5*time.Second, "replication", func() error {
			if s.Current().Version != last {
				return fmt.Errorf("%s at %d", s.ID(), s.Current().Version)
			}
			return nil
		})
	}
	wantSet, wantHist := l.Current(), l.History(0)
	if len(wantSet.Overrides) != 2 || len(wantHist) != 6 {
		t.Fatalf("setup: %+v %+v", wantSet, wantHist)
	}

	for _, s := range c.stores {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cfgs := c.cfgs
	c.stores, c.cfgs = nil, nil
	for _, cfg := range cfgs {
		c.open(cfg)
	}
	if err := c.stores[0].Bootstrap(nil); !errors.Is(err, ErrAlreadyBootstrapped) {
		t.Fatalf("Bootstrap on reopened store: %v", err)
	}
	c.leader()
	for _, s := range c.stores {
		waitFor(t, 10*time.Second, "state back on "+s.ID(), func() error {
			if got := s.Current(); !reflect.DeepEqual(got, wantSet) {
				return fmt.Errorf("set %+v", got)
			}
			if got := s.History(0); !reflect.DeepEqual(got, wantHist) {
				return fmt.Errorf("history %+v", got)
			}
			return nil
		})
	}
}

func TestConcurrentWritersAndWatchers(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := c.leader()
	var follower *Store
	for _, s := range c.stores {
		if s != l {
			follower = s
		}
	}
	const writers, each = 4, 10
	watches := map[string]<-chan Event{"leader": l.Watch(ctx, 0), "follower": follower.Watch(ctx, 0)}
	if n := l.Watchers() + follower.Watchers(); n != 2 {
		t.Fatalf("Watchers = %d, want 2", n)
	}

	var mu sync.Mutex
	var versions []uint64
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				v, err := l.Apply(ctx, Command{Op: OpApply, Rules: []rules.Rule{rule(fmt.Sprintf("w%d-%d", w, i), 1)}})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				versions = append(versions, v)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(versions)
	if len(slices.Compact(slices.Clone(versions))) != writers*each {
		t.Fatalf("versions not distinct: %v", versions)
	}
	top := versions[len(versions)-1]

	for name, ch := range watches {
		var seen []uint64
		timeout := time.After(10 * time.Second)
		for len(seen) == 0 || seen[len(seen)-1] < top {
			select {
			case ev, ok := <-ch:
				if !ok {
					t.Fatalf("%s watch closed early", name)
				}
				// Each event is the full set at its version: one more rule each time.
				if got := len(ev.Set.Rules); got != len(seen) {
					t.Fatalf("%s: event %d (version %d) has %d rules", name, len(seen), ev.Set.Version, got)
				}
				seen = append(seen, ev.Set.Version)
			case <-timeout:
				t.Fatalf("%s watch saw %v, want up to %d", name, seen, top)
			}
		}
		if want := append([]uint64{0}, versions...); !reflect.DeepEqual(seen, want) {
			t.Fatalf("%s watch saw %v\nwant %v", name, seen, want)
		}
	}

	// A watch from a past version starts with the current set; one from the
	// current version waits for the next.
	ev := <-l.Watch(ctx, versions[3])
	if ev.Set.Version != top {
		t.Fatalf("watch from %d first got %d, want current %d", versions[3], ev.Set.Version, top)
	}
	wctx, wcancel := context.WithCancel(ctx)
	quiet := l.Watch(wctx, top)
	got := make(chan uint64, 1)
	go func() {
		s, err := follower.WaitVersion(ctx, top)
		if err != nil {
			got <- 0
			return
		}
		got <- s.Version
	}()
	v, err := l.Apply(ctx, Command{Op: OpDeleteRule, ID: "w0-0"})
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-quiet; ev.Set.Version != v || hasRule(ev.Set, "w0-0") {
		t.Fatalf("watch from current got version %d, want %d", ev.Set.Version, v)
	}
	if gv := <-got; gv != v {
		t.Fatalf("WaitVersion returned %d, want %d", gv, v)
	}
	wcancel()
	for range quiet { // closed once its context is done
	}

	cancel()
	waitFor(t, 5*time.Second, "watchers to end", func() error {
		if n := l.Watchers() + follower.Watchers(); n != 0 {
			return fmt.Errorf("%d watchers", n)
		}
		return nil
	})
}

func TestReconcileVotersAndLeaves(t *testing.T) {
	var clockMu sync.Mutex
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }

	c := &cluster{t: t}
	for i := range 4 {
		cfg := testConfig(t, fmt.Sprintf("n%d", i))
		cfg.Clock = clock
		cfg.VoterGrace = time.Minute
		c.open(cfg)
	}
	s0 := c.stores[0]
	if err := s0.Bootstrap(nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n0 to lead", func() error {
		if !s0.IsLeader() {
			return errors.New("not yet")
		}
		return nil
	})
	ctx := context.Background()
	all := func(ids ...int) []Server {
		var out []Server
		for _, i := range ids {
			out = append(out, Server{ID: c.stores[i].ID(), Addr: c.stores[i].Addr()})
		}
		return out
	}
	conf := func() map[string]bool {
		t.Helper()
		cs, err := s0.Configuration()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, s := range cs {
			m[s.ID] = s.Voter
		}
		return m
	}

	if err := s0.Reconcile(ctx, all(0, 1, 2, 3), nil); err != nil {
		t.Fatal(err)
	}
	if got, want := conf(), map[string]bool{"n0": true, "n1": true, "n2": true, "n3": false}; !reflect.DeepEqual(got, want) {
		t.Fatalf("configuration %v, want %v", got, want)
	}
	// The non-voter replicates too.
	v, err := s0.Apply(ctx, Command{Op: OpApply, Rules: []rules.Rule{rule("a", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "n3 to replicate", func() error {
		if c.stores[3].Current().Version != v {
			return errors.New("behind")
		}
		return nil
	})
	// Followers do nothing.
	if err := c.stores[1].Reconcile(ctx, all(1), []string{"n0"}); err != nil {
		t.Fatal(err)
	}
	// Idempotent.
	if err := s0.Reconcile(ctx, all(0, 1, 2, 3), nil); err != nil {
		t.Fatal(err)
	}

	// n1 dies. Within the grace nothing changes; after it n3 takes its vote.
	if err := c.stores[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := s0.Reconcile(ctx, all(0, 2, 3), nil); err != nil {
		t.Fatal(err)
	}
	advance(59 * time.Second)
	if err := s0.Reconcile(ctx, all(0, 2, 3), nil); err != nil {
		t.Fatal(err)
	}
	if got := conf(); !got["n1"] || got["n3"] {
		t.Fatalf("promoted before the grace ran out: %v", got)
	}
	advance(time.Second)
	if err := s0.Reconcile(ctx, all(0, 2, 3), nil); err != nil {
		t.Fatal(err)
	}
	if got, want := conf(), map[string]bool{"n0": true, "n1": false, "n2": true, "n3": true}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after grace: %v, want %v", got, want)
	}
	// n1 leaves for good.
	if err := s0.Reconcile(ctx, all(0, 2, 3), []string{"n1"}); err != nil {
		t.Fatal(err)
	}
	if got, want := conf(), map[string]bool{"n0": true, "n2": true, "n3": true}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after leave: %v, want %v", got, want)
	}
	// The group still commits with its new voters.
	if _, err := s0.Apply(ctx, Command{Op: OpDeleteRule, ID: "a"}); err != nil {
		t.Fatal(err)
	}
}

func TestBootstrapTwice(t *testing.T) {
	c := &cluster{t: t}
	s := c.open(testConfig(t, "solo"))
	if err := s.Bootstrap(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Bootstrap(nil); !errors.Is(err, ErrAlreadyBootstrapped) {
		t.Fatalf("second Bootstrap: %v", err)
	}
	c.leader()
	if err := s.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if ch := s.Watch(context.Background(), 0); ch != nil {
		if _, ok := <-ch; ok {
			t.Fatalf("watch on closed store delivered")
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.ID, good.DataDir = "n1", "/tmp/x"
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	cases := map[string]func(*Config){
		"no id":              func(c *Config) { c.ID = "" },
		"no dir":             func(c *Config) { c.DataDir = "" },
		"history":            func(c *Config) { c.HistoryLimit = 0 },
		"apply timeout":      func(c *Config) { c.ApplyTimeout = 0 },
		"heartbeat":          func(c *Config) { c.HeartbeatTimeout = time.Millisecond },
		"election":           func(c *Config) { c.ElectionTimeout = c.HeartbeatTimeout / 2 },
		"lease":              func(c *Config) { c.LeaderLeaseTimeout = c.HeartbeatTimeout * 2 },
		"bind":               func(c *Config) { c.BindAddr = "nonsense" },
		"bind any":           func(c *Config) { c.BindAddr = "0.0.0.0:7000" },
		"advertise port 0":   func(c *Config) { c.AdvertiseAddr = "10.0.0.1:0" },
		"advertise any host": func(c *Config) { c.AdvertiseAddr = "0.0.0.0:7000" },
		"grace":              func(c *Config) { c.VoterGrace = 0 },
	}
	for name, mut := range cases {
		c := good
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
	c := good
	c.BindAddr, c.AdvertiseAddr = "0.0.0.0:7000", "10.0.0.1:7000"
	if err := c.Validate(); err != nil {
		t.Errorf("bind any with advertise: %v", err)
	}
}
