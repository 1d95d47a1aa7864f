package rulesraft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/rulesraft/rules"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testConfig(t *testing.T, id string) Config {
	cfg := DefaultConfig()
	cfg.ID = id
	cfg.DataDir = t.TempDir()
	// Generous lease: the test machine is small and shared, and a leader
	// that misses its lease steps down (tests retry as clients would).
	cfg.HeartbeatTimeout = 500 * time.Millisecond
	cfg.ElectionTimeout = 500 * time.Millisecond
	cfg.LeaderLeaseTimeout = 500 * time.Millisecond
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
	testwait.For(c.t, 10*time.Second, "a leader", func() error {
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

// leaderNow returns the live store that believes it leads, or nil.
func (c *cluster) leaderNow() *Store {
	for _, s := range c.live() {
		if s.IsLeader() {
			return s
		}
	}
	return nil
}

// apply sends cmd to the leader as a client would: while leadership moves
// (ErrNotLeader, ErrTimeout, ErrOutcomeUnknown) it retries on whichever store leads next.
// Other errors are returned as they are.
func (c *cluster) apply(cmd Command) (uint64, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if l := c.leaderNow(); l != nil {
			var v uint64
			if v, err = l.Apply(context.Background(), cmd); err == nil {
				return v, nil
			}
			if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrClosed) {
				return 0, err
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no leader accepted the command: %w", err)
		}
		time.Sleep(10 * time.Millisecond) // poll interval while leadership moves
	}
}

func (c *cluster) mustApply(cmd Command) uint64 {
	c.t.Helper()
	v, err := c.apply(cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

// waitVersion waits until every live store has applied version v.
func (c *cluster) waitVersion(v uint64) {
	c.t.Helper()
	for _, s := range c.live() {
		testwait.For(c.t, 10*time.Second, "version on "+s.ID(), func() error {
			if got := s.Current().Version; got < v {
				return fmt.Errorf("%s at %d, want %d", s.ID(), got, v)
			}
			return nil
		})
	}
}

func TestClusterReplicationFailoverAndMinority(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := context.Background()

	v := c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 5)}, Author: "ann"})
	if l := c.leaderNow(); l != nil && l.Current().Version < v {
		t.Fatalf("leader at %d after acknowledging %d", l.Current().Version, v)
	}
	c.waitVersion(v)
	for _, s := range c.stores {
		if got, want := s.Current(), c.stores[0].Current(); !reflect.DeepEqual(got, want) || !hasRule(got, "a") {
			t.Fatalf("%s has %+v, want %+v", s.ID(), got, want)
		}
		if h := s.History(1); len(h) != 1 || h[0].Author != "ann" || h[0].At.IsZero() {
			t.Fatalf("history on %s = %+v", s.ID(), h)
		}
	}

	// Followers refuse writes and know the leader.
	leader := c.leader()
	for _, s := range c.stores {
		if s.IsLeader() {
			continue
		}
		if _, err := s.Apply(ctx, Command{Op: OpApply, Rules: []rules.Rule{rule("x", 1)}}); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("follower Apply err = %v", err)
		}
		if id, addr := s.Leader(); id != leader.ID() || addr != leader.Addr() {
			t.Fatalf("follower sees leader %s@%s, want %s@%s", id, addr, leader.ID(), leader.Addr())
		}
	}
	// A rejected command reaches the caller and changes nothing.
	if _, err := c.apply(Command{Op: OpDeleteRule, ID: "nope"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete unknown: %v", err)
	}

	acked := []string{"a"}
	write := func(id string) {
		t.Helper()
		c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule(id, 1)}})
		acked = append(acked, id)
	}
	for i := range 5 {
		write(fmt.Sprintf("before-%d", i))
	}

	// Kill the leader; a new one takes over and writes go on.
	leader = c.leader()
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
	testwait.For(t, 10*time.Second, "a new leader", func() error {
		if c.leaderNow() == nil {
			return errors.New("none yet")
		}
		return nil
	})
	t.Logf("leader failover: %s from leader stop to a new leader", time.Since(stopped).Round(time.Millisecond))
	var top uint64
	for i := range 5 {
		write(fmt.Sprintf("after-%d", i))
	}
	top = c.leaderNow().Current().Version
	// No acknowledged write is lost on either survivor.
	c.waitVersion(top)
	for _, s := range c.live() {
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
	_, err := last.Apply(actx, Command{Op: OpApply, Rules: []rules.Rule{rule("minority", 1)}})
	if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("minority Apply err = %v, want ErrNotLeader, ErrTimeout or ErrOutcomeUnknown", err)
	}
	if hasRule(last.Current(), "minority") {
		t.Fatalf("uncommitted rule applied")
	}
	testwait.For(t, 5*time.Second, "the minority to step down", func() error {
		if last.IsLeader() {
			return errors.New("still leader")
		}
		return nil
	})
	t.Logf("minority write failed with: %v", err)
}

func TestReopenKeepsRulesOverridesAndHistory(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.TrailingLogs = 2 })
	v1 := c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 1), rule("b", 2)}, Author: "ann"})
	c.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "a", Key: "ak_1", Rate: 9}})
	v3 := c.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "b", Key: "ak_2", Block: true, ExpiresAt: time.Now().Add(24 * time.Hour)}})
	// Snapshot every member mid-way (log compacted to 2 trailing entries),
	// so they restart from snapshot + log.
	c.waitVersion(v3)
	for _, s := range c.stores {
		if err := s.raft.Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
	c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("c", 3)}})
	c.mustApply(Command{Op: OpRollback, Version: v1, Author: "bob"})
	c.mustApply(Command{Op: OpRollback, Version: v3, Author: "bob"})
	last := c.mustApply(Command{Op: OpSetOverride, Override: &rules.Override{Rule: "b", Key: "ak_3", Rate: 7}})
	c.waitVersion(last)
	wantSet, wantHist := c.stores[0].Current(), c.stores[0].History(0)
	if len(wantSet.Overrides) != 3 || len(wantSet.Rules) != 2 || len(wantHist) < 7 {
		t.Fatalf("setup: %+v %+v", wantSet, wantHist)
	}
	for _, s := range c.stores[1:] {
		if !reflect.DeepEqual(s.Current(), wantSet) || !reflect.DeepEqual(s.History(0), wantHist) {
			t.Fatalf("%s differs before restart", s.ID())
		}
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
	for _, s := range c.stores {
		testwait.For(t, 15*time.Second, "state back on "+s.ID(), func() error {
			if got := s.Current(); !reflect.DeepEqual(got, wantSet) {
				return fmt.Errorf("set %+v", got)
			}
			if got := s.History(0); !reflect.DeepEqual(got, wantHist) {
				return fmt.Errorf("history %+v", got)
			}
			return nil
		})
	}
	// And the group still takes writes.
	c.mustApply(Command{Op: OpDeleteRule, ID: "a"})
}

func TestConcurrentWritersAndWatchers(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watches := map[string]<-chan Event{}
	for _, s := range c.stores {
		watches[s.ID()] = s.Watch(ctx, 0)
		if n := s.Watchers(); n != 1 {
			t.Fatalf("Watchers = %d, want 1", n)
		}
	}

	const writers, each = 4, 10
	var mu sync.Mutex
	var acked []uint64
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				v, err := c.apply(Command{Op: OpApply, Rules: []rules.Rule{rule(fmt.Sprintf("w%d-%d", w, i), 1)}})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				acked = append(acked, v)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(acked)
	if len(slices.Compact(slices.Clone(acked))) != writers*each {
		t.Fatalf("versions not distinct: %v", acked)
	}
	top := acked[len(acked)-1]
	c.waitVersion(top)

	// Every version, oldest first (a retried write may add one the writer
	// never saw acknowledged).
	ref := c.stores[0]
	all := []uint64{0}
	hist := ref.History(0)
	for i := len(hist) - 1; i >= 0; i-- {
		all = append(all, hist[i].Version)
	}
	for _, v := range acked {
		if _, ok := slices.BinarySearch(all, v); !ok {
			t.Fatalf("acknowledged version %d missing from history %v", v, all)
		}
	}
	for name, ch := range watches {
		var seen []uint64
		timeout := time.After(10 * time.Second)
		for len(seen) < len(all) {
			select {
			case ev, ok := <-ch:
				if !ok {
					t.Fatalf("%s watch closed early", name)
				}
				want, err := ref.SetAt(ev.Set.Version)
				if err != nil || !reflect.DeepEqual(ev.Set, want) {
					t.Fatalf("%s: event at version %d is not the set at that version (%v)", name, ev.Set.Version, err)
				}
				seen = append(seen, ev.Set.Version)
			case <-timeout:
				t.Fatalf("%s watch saw %v, want %v", name, seen, all)
			}
		}
		if !reflect.DeepEqual(seen, all) {
			t.Fatalf("%s watch saw %v\nwant %v", name, seen, all)
		}
	}

	// A watch from a past version starts with the current set; one from the
	// current version waits for the next, as does WaitVersion.
	l := c.leader()
	if ev := <-l.Watch(ctx, acked[3]); ev.Set.Version != top {
		t.Fatalf("watch from %d first got %d, want current %d", acked[3], ev.Set.Version, top)
	}
	wctx, wcancel := context.WithCancel(ctx)
	quiet := l.Watch(wctx, top)
	got := make(chan uint64, 1)
	follower := c.stores[0]
	if follower == l {
		follower = c.stores[1]
	}
	go func() {
		s, err := follower.WaitVersion(ctx, top)
		if err != nil {
			got <- 0
			return
		}
		got <- s.Version
	}()
	v := c.mustApply(Command{Op: OpDeleteRule, ID: "w0-0"})
	if ev := <-quiet; ev.Set.Version != v || hasRule(ev.Set, "w0-0") {
		t.Fatalf("watch from current got version %d, want %d", ev.Set.Version, v)
	}
	if gv := <-got; gv != v {
		t.Fatalf("WaitVersion returned %d, want %d", gv, v)
	}
	wcancel()
	for range quiet { // closed once its context is done
	}
	if _, err := follower.WaitVersion(wctx, v); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitVersion on a done context: %v", err)
	}

	cancel()
	testwait.For(t, 5*time.Second, "watchers to end", func() error {
		n := 0
		for _, s := range c.stores {
			n += s.Watchers()
		}
		if n != 0 {
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
	if err := c.stores[0].Bootstrap(nil); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	servers := func(ids ...int) []Server {
		var out []Server
		for _, i := range ids {
			out = append(out, Server{ID: c.stores[i].ID(), Addr: c.stores[i].Addr()})
		}
		return out
	}
	conf := func(s *Store) (map[string]bool, error) {
		cs, err := s.Configuration()
		if err != nil {
			return nil, err
		}
		m := map[string]bool{}
		for _, sv := range cs {
			m[sv.ID] = sv.Voter
		}
		return m, nil
	}
	// converge calls Reconcile on the leader until the configuration is
	// want, as the node does on every membership change; before a retry it
	// runs between (nil for none).
	converge := func(alive []Server, left []string, want map[string]bool, between func()) {
		t.Helper()
		tries := 0
		testwait.For(t, 20*time.Second, fmt.Sprintf("configuration %v", want), func() error {
			if tries++; tries > 1 && between != nil {
				between()
			}
			l := c.leaderNow()
			if l == nil {
				return errors.New("no leader")
			}
			if err := l.Reconcile(ctx, alive, left); err != nil {
				return err
			}
			got, err := conf(l)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(got, want) {
				return fmt.Errorf("configuration %v", got)
			}
			return nil
		})
	}

	converge(servers(0, 1, 2, 3), nil, map[string]bool{"n0": true, "n1": true, "n2": true, "n3": false}, nil)
	// The non-voter replicates too.
	v := c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 1)}})
	c.waitVersion(v)
	// Followers do nothing.
	for _, s := range c.stores {
		if !s.IsLeader() {
			if err := s.Reconcile(ctx, servers(1), []string{"n0", "n2"}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// n1 dies. Within the grace nothing changes; after it n3 takes its vote.
	if err := c.stores[1].Close(); err != nil {
		t.Fatal(err)
	}
	before := map[string]bool{"n0": true, "n1": true, "n2": true, "n3": false}
	converge(servers(0, 2, 3), nil, before, nil) // n1 first seen missing
	advance(59 * time.Second)
	converge(servers(0, 2, 3), nil, before, nil)
	advance(time.Second)
	// (If leadership moved, the new leader starts its own grace: keep the
	// clock moving between retries.)
	converge(servers(0, 2, 3), nil, map[string]bool{"n0": true, "n1": false, "n2": true, "n3": true},
		func() { advance(time.Minute) })
	// n1 leaves for good.
	converge(servers(0, 2, 3), []string{"n1"}, map[string]bool{"n0": true, "n2": true, "n3": true}, nil)
	// The group commits with its new voters.
	c.mustApply(Command{Op: OpDeleteRule, ID: "a"})
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
		"advertise no port":  func(c *Config) { c.AdvertiseAddr = "10.0.0.1" },
		"advertise bad port": func(c *Config) { c.AdvertiseAddr = "10.0.0.1:http" },
		"advertise any host": func(c *Config) { c.AdvertiseAddr = "0.0.0.0:7000" },
		"advertise no host":  func(c *Config) { c.AdvertiseAddr = ":7000" },
		"grace":              func(c *Config) { c.VoterGrace = 0 },
	}
	for name, mut := range cases {
		c := good
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
	for _, adv := range []string{"10.0.0.1:7000", "10.0.0.1:0", "weir-0.weir-peers.default.svc:7000"} {
		c := good
		c.BindAddr, c.AdvertiseAddr = "0.0.0.0:7000", adv
		if err := c.Validate(); err != nil {
			t.Errorf("bind any with advertise %s: %v", adv, err)
		}
	}
}

// Every member of the group comes back at a new address at once (a whole
// StatefulSet rescheduled): no configured address is right any more, so no
// member could reach another and no leader could be elected to fix the
// configuration. With PeerAddr telling the current addresses (what the
// node learns from gossip), Raft dials those: a leader is elected, the
// rules are intact, and writes reach every member. Reconcile leaves the
// configured addresses alone (changing them in place races in
// hashicorp/raft); without PeerAddr it moves them.
func TestEveryMemberMovedFindsEachOtherByPeerAddr(t *testing.T) {
	var mu sync.Mutex
	current := map[string]string{}
	peerAddr := func(id string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		a, ok := current[id]
		return a, ok
	}
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.PeerAddr = peerAddr
		cfg.AdvertiseAddr = "localhost:0" // a name: kept as given, resolved at every dial
	})
	for _, s := range c.stores {
		if a := s.Addr(); !strings.HasPrefix(a, "localhost:") || strings.HasSuffix(a, ":0") {
			t.Fatalf("Addr() = %q, want the advertised name with the bound port", a)
		}
	}
	v := c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 1), rule("b", 2)}})
	c.waitVersion(v)
	old := map[string]string{}
	for _, s := range c.stores {
		old[s.ID()] = s.Addr()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cfgs := c.cfgs
	c.stores, c.cfgs = nil, nil
	for _, cfg := range cfgs {
		cfg.BindAddr = "127.0.0.1:0" // a new port for everyone
		s := c.open(cfg)
		mu.Lock()
		current[s.ID()] = s.Addr()
		mu.Unlock()
		if s.Addr() == old[s.ID()] {
			t.Fatalf("%s came back at its old address %s", s.ID(), s.Addr())
		}
	}
	l := c.leader()
	var alive []Server
	for _, s := range c.stores {
		alive = append(alive, Server{ID: s.ID(), Addr: s.Addr()})
	}
	if err := l.Reconcile(context.Background(), alive, nil); err != nil {
		t.Fatal(err)
	}
	conf, err := l.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range conf {
		if m.Addr != old[m.ID] || !m.Voter {
			t.Errorf("configuration has %s at %s (voter %v), want it unchanged: %s, a voter", m.ID, m.Addr, m.Voter, old[m.ID])
		}
	}
	v2 := c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("c", 3)}})
	c.waitVersion(v2)
	for _, s := range c.stores {
		for _, id := range []string{"a", "b", "c"} {
			if !hasRule(s.Current(), id) {
				t.Errorf("%s lacks rule %s after the move", s.ID(), id)
			}
		}
	}
}

// Close does not wait out a dial to a member whose address vanished (its
// container or pod is gone, so nothing answers, not even with a reset):
// Raft's Shutdown waits for its RPCs, and the dial in flight is aborted.
func TestCloseAbortsDialsToVanishedMembers(t *testing.T) {
	cfg := testConfig(t, "n1")
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A voter at an address where connections hang (as to an IP nobody
	// holds any more), so every election asks it for a vote and waits.
	if err := s.Bootstrap([]Server{{ID: "n1", Addr: s.Addr()}, {ID: "ghost", Addr: blackhole(t)}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "an election", func() error {
		if s.State() != "candidate" {
			return fmt.Errorf("state %s", s.State())
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond) // let the vote request's dial start
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Close took %v with a dial to a vanished member in flight; the transport timeout is 10s", took)
	}
}

// blackhole returns a loopback address where dials hang: a socket that
// listens with a backlog of one already taken and never accepts, so the
// kernel drops further SYNs (a dial waits out its timeout, as to an
// address nobody holds).
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	c, err := net.DialTimeout("tcp", addr, time.Second) // fills the backlog
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c2, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c2.Close()
		t.Skip("this kernel accepts past a full backlog; no blackhole")
	}
	return addr
}

// Without PeerAddr, Reconcile moves a member that came back at a new
// address: the leader rewrites its address and replicates to it there.
func TestReconcileMovesAMemberWithoutPeerAddr(t *testing.T) {
	c := newCluster(t, 3, nil)
	v := c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("a", 1)}})
	c.waitVersion(v)
	l := c.leader()
	var moved int
	for i, s := range c.stores {
		if s != l {
			moved = i
			break
		}
	}
	if err := c.stores[moved].Close(); err != nil {
		t.Fatal(err)
	}
	cfg := c.cfgs[moved]
	cfg.BindAddr = "127.0.0.1:0"
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c.stores[moved] = s
	var alive []Server
	for _, st := range c.stores {
		alive = append(alive, Server{ID: st.ID(), Addr: st.Addr()})
	}
	if err := l.Reconcile(context.Background(), alive, nil); err != nil {
		t.Fatal(err)
	}
	conf, err := l.Configuration()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range conf {
		if m.ID == s.ID() && (m.Addr != s.Addr() || !m.Voter) {
			t.Fatalf("configuration has %s at %s (voter %v), want a voter at %s", m.ID, m.Addr, m.Voter, s.Addr())
		}
	}
	v2 := c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("b", 2)}})
	c.waitVersion(v2)
}

// TestReadIndex: the leader's read index covers every acknowledged write;
// followers refuse to give one, and after waiting for it a follower's
// local set has the write.
func TestReadIndex(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := context.Background()
	for i := range 5 {
		v := c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule(fmt.Sprintf("r%d", i), 5)}})
		l := c.leader()
		ri, err := l.ReadIndex(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ri < v {
			t.Fatalf("read index %d below the acknowledged write %d", ri, v)
		}
		for _, s := range c.live() {
			if s == l {
				continue
			}
			if _, err := s.ReadIndex(ctx); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("ReadIndex on follower %s: %v, want ErrNotLeader", s.ID(), err)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			set, err := s.WaitVersion(wctx, ri-1)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if !hasRule(set, fmt.Sprintf("r%d", i)) {
				t.Fatalf("%s at %d lacks r%d", s.ID(), set.Version, i)
			}
		}
	}
}

// A write the leader refuses never enters the log, so it uses no version:
// with no election between them, the next good write is the previous + 1.
func TestRefusedWriteUsesNoVersion(t *testing.T) {
	c := newCluster(t, 1, nil)
	l := c.leader()
	ctx := context.Background()
	v1, err := l.Apply(ctx, Command{Op: OpApply, Rules: []rules.Rule{rule("a", 5)}})
	if err != nil {
		t.Fatal(err)
	}
	bad := rule("b", 5)
	bad.Algorithm = "no_such_algorithm"
	refused := []Command{
		{Op: OpApply, Rules: []rules.Rule{bad}},
		{Op: OpDeleteRule, ID: "missing"},
		{Op: OpDeleteOverride, Rule: "a", Key: "nobody"},
		{Op: OpRollback, Version: v1 + 100},
		{Op: "bogus"},
	}
	for _, cmd := range refused {
		before, _ := l.Indexes()
		if _, err := l.Apply(ctx, cmd); err == nil {
			t.Fatalf("%+v accepted", cmd)
		}
		if after, _ := l.Indexes(); after != before {
			t.Fatalf("%s: refused write appended to the log (%d -> %d)", cmd.Op, before, after)
		}
	}
	v2, err := l.Apply(ctx, Command{Op: OpApply, Rules: []rules.Rule{rule("c", 5)}})
	if err != nil {
		t.Fatal(err)
	}
	if v2 != v1+1 {
		t.Fatalf("version after refused writes = %d, want %d", v2, v1+1)
	}
}

// A follower learns that a write is committed from the nudge that Apply
// sends after it, not from Raft's commit timer: with the timer at an hour,
// every member still applies each write (and a read-your-writes read on a
// follower, which waits for that, still answers).
func TestFollowersApplyAWriteWithoutTheCommitTimer(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.CommitTimeout = time.Hour })
	c.leader()
	for i := range 3 {
		v := c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule(fmt.Sprintf("r%d", i), 5)}})
		c.waitVersion(v)
	}
}

// A new leader's read index covers the writes its predecessor acknowledged
// even while its FSM has not applied them yet. hashicorp's AppliedIndex
// counts the entries handed to the FSM goroutine, not the ones it applied,
// so "AppliedIndex == LastIndex" (the new term's no-op committed and handed
// over) does not mean the FSM is up to date: a read index taken from the
// FSM then was older than an acknowledged write, and a read answered the
// value before it. That was the "Illegal" history of
// TestRulesLinearizableUnderLeaderKills (a restarted or loaded node whose
// FSM lagged became leader). The followers' FSMs are held here (their
// lock) while the leader acknowledges a write and is closed; the next
// leader's read index must wait for its FSM rather than answer.
func TestNewLeaderReadIndexWaitsForItsFSM(t *testing.T) {
	c := newCluster(t, 3, nil)
	old := c.leader()
	var held []*FSM
	for _, s := range c.live() {
		if s != old {
			s.fsm.mu.Lock()
			held = append(held, s.fsm)
		}
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			for _, f := range held {
				f.mu.Unlock()
			}
		})
	}
	t.Cleanup(release)
	v, err := old.Apply(context.Background(), Command{Op: OpApply, Rules: []rules.Rule{rule("acked", 5)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	l := c.leader()
	testwait.For(t, 10*time.Second, "the new term's no-op handed to the FSM", func() error {
		if last, applied := l.Indexes(); applied < last {
			return fmt.Errorf("applied %d of %d", applied, last)
		}
		return nil
	})
	if got := l.Current().Version; got >= v {
		t.Fatalf("the held FSM applied version %d", got)
	}
	type answer struct {
		v   uint64
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		ri, err := l.ReadIndex(context.Background())
		ch <- answer{ri, err}
	}()
	var a answer
	select {
	case a = <-ch: // answered while the FSM is held: it must still cover v
	case <-time.After(time.Second): // waiting for the FSM, as it should: let it go
		release()
		a = <-ch
	}
	release()
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.v < v {
		t.Fatalf("read index %d is below the write %d the old leader acknowledged", a.v, v)
	}
}

// A command in the log of a leader that loses leadership before it commits
// has an unknown outcome (the next leader may commit it): Apply says so
// with ErrOutcomeUnknown, never ErrNotLeader, which means "refused before
// the log" and which the CLI sends again (a second application, after
// another client's write, would undo that write). The followers are
// closed so the command cannot commit and the leader steps down when its
// lease runs out.
func TestLeadershipLostWriteIsNotNotLeader(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader()
	c.mustApply(Command{Op: OpApply, Rules: []rules.Rule{rule("first", 5)}})
	for _, s := range c.live() {
		if s != l {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err := l.Apply(context.Background(), Command{Op: OpApply, Rules: []rules.Rule{rule("lost", 5)}})
	switch {
	case errors.Is(err, ErrNotLeader):
		t.Fatalf("a command that reached the log answered %v: a client would send it again", err)
	case errors.Is(err, ErrOutcomeUnknown), errors.Is(err, ErrTimeout): // the lease ran out first, or the apply timeout
	case err == nil:
		t.Fatal("committed without a quorum")
	default:
		t.Fatalf("Apply: %v, want an unknown outcome", err)
	}
}
