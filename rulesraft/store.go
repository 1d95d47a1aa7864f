package rulesraft

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// Server names one member of the Raft group.
type Server struct {
	ID   string
	Addr string
}

// ServerInfo is one entry of the Raft configuration.
type ServerInfo struct {
	ID    string
	Addr  string
	Voter bool
}

// Store is one member of the rules Raft group: the FSM plus the Raft
// instance, its durable stores and its TCP transport.
type Store struct {
	cfg   Config
	log   *slog.Logger
	clock func() time.Time

	fsm   *FSM
	raft  *raft.Raft
	trans *raft.NetworkTransport
	layer *tcpLayer
	bolt  *raftboltdb.BoltStore
	snaps *raft.FileSnapshotStore

	watchers atomic.Int64
	// leaderChanged gets a signal (coalesced) each time the leader this
	// member knows changes (LeaderChanged).
	leaderChanged chan struct{}

	// caughtUp is the last term in which this member, leading, saw a
	// Barrier through (see leaderCaughtUp).
	caughtUp atomic.Uint64

	// mu guards closed and the WaitGroup's Add against Close's Wait.
	mu       sync.Mutex
	closed   bool
	stop     chan struct{} // closed when Close starts
	wg       sync.WaitGroup
	done     chan struct{} // closed when Close has finished
	closeErr error         // written before done is closed

	recMu        sync.Mutex           // serializes Reconcile
	missingSince map[string]time.Time // voter ID -> first seen missing; guarded by recMu
}

// Open opens (creating if needed) the data directory, the bolt log and
// stable store, the snapshot store and the TCP transport, and starts Raft.
// It does not bootstrap: call Bootstrap on a fresh cluster, or let the
// leader add this member with Reconcile.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "rulesraft", "id", cfg.ID)
	clock := cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	s := &Store{
		cfg:           cfg,
		log:           logger,
		clock:         clock,
		fsm:           NewFSM(cfg.HistoryLimit),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
		missingSince:  make(map[string]time.Time),
		leaderChanged: make(chan struct{}, 1),
	}
	hc := newHCLogger("raft", logger)
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("raft data dir: %w", err)
	}
	var err error
	s.bolt, err = raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.DataDir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: time.Second},
	})
	if err != nil {
		return nil, fmt.Errorf("open raft.db: %w", err)
	}
	s.snaps, err = raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, hc)
	if err != nil {
		s.bolt.Close()
		return nil, fmt.Errorf("raft snapshot store: %w", err)
	}
	layer, err := listenTCP(cfg.BindAddr, cfg.AdvertiseAddr)
	if err == nil && cfg.ServerTLS != nil && cfg.ClientTLS != nil {
		layer.useTLS(cfg.ServerTLS, cfg.ClientTLS, logger)
	}
	if err != nil {
		s.bolt.Close()
		return nil, fmt.Errorf("raft listen: %w", err)
	}
	s.layer = layer
	layer.hello, layer.check = cfg.Hello, cfg.CheckHello
	if cfg.Members != nil {
		layer.rpc = &rpcCheck{members: cfg.Members, log: s.log, refused: cfg.RefusedRPC}
		layer.peerID = cfg.PeerID
	}
	layer.reject = func(c net.Conn) {
		s.log.Warn("raft connection without a valid hello refused", "from", c.RemoteAddr().String())
	}
	s.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hc,

		ServerAddressProvider: peerAddrs(cfg.PeerAddr),
	})
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cmp.Or(cfg.CommitTimeout, cfg.HeartbeatTimeout/2)
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.Logger = hc
	s.raft, err = raft.NewRaft(rc, s.fsm, s.bolt, s.bolt, s.snaps, s.trans)
	if err != nil {
		s.trans.Close()
		s.bolt.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	if layer.rpc != nil {
		layer.rpc.raft.Store(refOf(s.raft))
	}
	s.raft.RegisterObserver(raft.NewObserver(nil, false, s.observeLeader))
	return s, nil
}

// observeLeader is Raft's observer filter: it runs on Raft's goroutine
// for every observation and turns a leader change into a signal on
// leaderChanged without blocking. It keeps none (no channel to send to).
func (s *Store) observeLeader(o *raft.Observation) bool {
	if _, ok := o.Data.(raft.LeaderObservation); ok {
		select {
		case s.leaderChanged <- struct{}{}:
		default: // one signal pending already says the same
		}
	}
	return false
}

// LeaderChanged receives a signal after the leader this member knows
// (Leader) changed, to unknown included; signals coalesce, so read Leader
// again after each. A loop that needs the leader only when it changes
// waits here instead of polling.
func (s *Store) LeaderChanged() <-chan struct{} { return s.leaderChanged }

// Addr returns the address peers reach this member at (with the real port
// when BindAddr used port 0).
func (s *Store) Addr() string { return string(s.trans.LocalAddr()) }

// ID returns this member's ID.
func (s *Store) ID() string { return s.cfg.ID }

// Bootstrap makes servers (all voters; this member alone when empty) the
// first configuration of a new group. With existing Raft state it changes
// nothing and returns ErrAlreadyBootstrapped.
func (s *Store) Bootstrap(servers []Server) error {
	if s.isClosed() {
		return ErrClosed
	}
	has, err := raft.HasExistingState(s.bolt, s.bolt, s.snaps)
	if err != nil {
		return fmt.Errorf("rules store: bootstrap: %w", err)
	}
	if has {
		return ErrAlreadyBootstrapped
	}
	if len(servers) == 0 {
		servers = []Server{{ID: s.cfg.ID, Addr: s.Addr()}}
	}
	var conf raft.Configuration
	for _, sv := range servers {
		conf.Servers = append(conf.Servers, raft.Server{
			Suffrage: raft.Voter, ID: raft.ServerID(sv.ID), Address: raft.ServerAddress(sv.Addr),
		})
	}
	if err := s.raft.BootstrapCluster(conf).Error(); err != nil {
		if errors.Is(err, raft.ErrCantBootstrap) {
			return ErrAlreadyBootstrapped
		}
		return fmt.Errorf("rules store: bootstrap: %w", err)
	}
	return nil
}

// Apply stamps cmd with the leader's clock, commits it through Raft and
// returns the version it made. Only the leader accepts commands; elsewhere
// it returns ErrNotLeader (Leader tells where to go). An acknowledged
// command is committed on a majority. A rejected command (ErrInvalid,
// ErrNotFound, ErrVersionGone) changed nothing and, when the leader's
// state already refuses it, used no log index (no version).
func (s *Store) Apply(ctx context.Context, cmd Command) (uint64, error) {
	if s.isClosed() {
		return 0, ErrClosed
	}
	if s.raft.State() != raft.Leader {
		return 0, s.notLeader()
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	// Refuse a command that would fail before it enters the log, so a
	// refused write uses no log index (versions are log indexes); the FSM
	// checks again on every replica, against whatever it follows. The
	// check reads this leader's FSM, so that has to hold every earlier
	// term's entries first (a new leader's may not yet: a rule its
	// predecessor created would be "not found").
	if err := s.leaderCaughtUp(ctx); err != nil {
		return 0, err
	}
	cmd.At = s.clock().UTC()
	if err := s.fsm.Check(cmd); err != nil {
		return 0, err
	}
	if err := s.checkFeatures(cmd); err != nil {
		return 0, err
	}
	data, err := encodeCommand(cmd)
	if err != nil {
		return 0, err
	}
	f := s.raft.Apply(data, timeout(ctx))
	if err := s.wait(ctx, f); err != nil {
		if errors.Is(err, raft.ErrLeadershipLost) {
			// In the log, maybe in the next leader's: not "not the
			// leader", which clients send again.
			return 0, fmt.Errorf("%w: leadership was lost before the command committed; the next leader may still apply it (read before sending it again): %v", ErrOutcomeUnknown, raft.ErrLeadershipLost)
		}
		return 0, err
	}
	s.nudge()
	res, ok := f.Response().(Result)
	if !ok {
		return 0, fmt.Errorf("rules store: unexpected FSM response %T", f.Response())
	}
	return res.Version, res.Err
}

// nudge tells the followers at once that what the leader just
// acknowledged is committed. Raft sends a follower the commit index only
// with its next AppendEntries: the next entry, or an empty one each
// CommitTimeout; that timer is slowed (Config.CommitTimeout) so an idle
// leader does not wake every follower 10 to 20 times a second, and this
// entry takes its place after a write. A Barrier is such an entry (no
// command, never applied to the FSM, but it takes a log index, so the
// next version is two further on); nobody waits for it. A group of one
// has nobody to tell.
func (s *Store) nudge() {
	f := s.raft.GetConfiguration() // answered at once, from Raft's copy
	if f.Error() != nil || len(f.Configuration().Servers) < 2 {
		return
	}
	s.raft.Barrier(s.cfg.ApplyTimeout)
}

// wait waits for a Raft future within ctx and maps Raft's errors to ours.
// The waiting goroutine is tracked; Raft's shutdown ends it.
func (s *Store) wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	if !s.goFunc(func() { done <- f.Error() }) {
		return ErrClosed
	}
	select {
	case err := <-done:
		return s.mapErr(err)
	case <-ctx.Done():
		return fmt.Errorf("%w: outcome unknown: %w", ErrTimeout, ctx.Err())
	}
}

func (s *Store) mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return s.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost):
		// A Barrier or VerifyLeader (Apply tells its own command apart).
		return fmt.Errorf("%w: leadership lost: %w", s.notLeader(), err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	}
	return fmt.Errorf("rules store: %w", err)
}

func (s *Store) notLeader() error {
	id, addr := s.Leader()
	if id == "" {
		return fmt.Errorf("%w (no leader known)", ErrNotLeader)
	}
	return fmt.Errorf("%w (leader %s at %s)", ErrNotLeader, id, addr)
}

// bound adds the ApplyTimeout deadline to ctx unless it has an earlier one.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.ApplyTimeout)
}

func timeout(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return max(time.Until(d), time.Millisecond)
}

// Leader returns the current leader's ID and address, empty when unknown.
func (s *Store) Leader() (id, addr string) {
	a, i := s.raft.LeaderWithID()
	return string(i), string(a)
}

// IsLeader reports whether this member is the leader.
func (s *Store) IsLeader() bool { return s.raft.State() == raft.Leader }

// State returns "leader", "follower", "candidate" or "shutdown".
func (s *Store) State() string { return strings.ToLower(s.raft.State().String()) }

// Indexes returns the Raft log's last index, and the last index the FSM
// applied (how far behind the rules of this node are).
func (s *Store) Indexes() (last, applied uint64) {
	return s.raft.LastIndex(), s.raft.AppliedIndex()
}

// LastContact is when this node last heard from the leader (zero for a
// leader or before any contact).
func (s *Store) LastContact() time.Time { return s.raft.LastContact() }

// Barrier waits until every command committed before it is applied to the
// local FSM: after it returns nil on the leader, Current is up to date.
func (s *Store) Barrier(ctx context.Context) error {
	if s.isClosed() {
		return ErrClosed
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.wait(ctx, s.raft.Barrier(timeout(ctx)))
}

// ReadIndex is the leader's half of a read-your-writes read: it confirms
// this member still leads (a heartbeat round to a majority, no log write)
// and returns a version that covers every write acknowledged before the
// call: its FSM's, once that holds every entry of earlier terms
// (leaderCaughtUp; the writes of this term it acknowledged itself, after
// its FSM applied them). A follower that has applied the returned version
// may answer the read. Elsewhere it returns ErrNotLeader.
func (s *Store) ReadIndex(ctx context.Context) (uint64, error) {
	if s.isClosed() {
		return 0, ErrClosed
	}
	if s.raft.State() != raft.Leader {
		return 0, s.notLeader()
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.wait(ctx, s.raft.VerifyLeader()); err != nil {
		return 0, err
	}
	if err := s.leaderCaughtUp(ctx); err != nil {
		return 0, err
	}
	return s.fsm.Current().Version, nil
}

// leaderCaughtUp returns once this leader's FSM holds every entry
// committed in earlier terms: at once when a Barrier went through in the
// current term, else after one. Raft's AppliedIndex cannot tell: it counts
// the entries handed to the FSM goroutine, not the ones applied, so a new
// leader whose term's no-op has committed can show AppliedIndex ==
// LastIndex while its FSM is still behind the writes its predecessor
// acknowledged (TestNewLeaderReadIndexWaitsForItsFSM). The term is read
// before the Barrier, which is appended in that term or a later one, so
// the mark never claims more than the Barrier proved. One Barrier (one
// log entry) per term.
func (s *Store) leaderCaughtUp(ctx context.Context) error {
	term := s.raft.CurrentTerm()
	if s.caughtUp.Load() == term {
		return nil
	}
	if err := s.wait(ctx, s.raft.Barrier(timeout(ctx))); err != nil {
		return err
	}
	s.caughtUp.Store(term)
	return nil
}

// Current returns the local rule set (possibly behind the leader). It must
// not be modified.
func (s *Store) Current() *rules.Set { return s.fsm.Current() }

// History returns up to limit history entries, newest first.
func (s *Store) History(limit int) []HistoryEntry { return s.fsm.History(limit) }

// SetAt returns the rule set at version v (ErrVersionGone, ErrNotFound).
func (s *Store) SetAt(v uint64) (*rules.Set, error) { return s.fsm.SetAt(v) }

// Watch streams rule sets: first the current set when from is 0 or older
// than the current version, then the set at every later version, in order
// and without gaps, while the history still holds them; a watcher that
// fell behind the history gets the current set and goes on from there. The
// channel is closed when ctx is done or the Store closes.
func (s *Store) Watch(ctx context.Context, from uint64) <-chan Event {
	out := make(chan Event)
	s.watchers.Add(1)
	if !s.goFunc(func() {
		defer close(out)
		defer s.watchers.Add(-1)
		s.fsm.watch(ctx, s.stop, from, out)
	}) {
		s.watchers.Add(-1)
		close(out)
	}
	return out
}

// Watchers returns the number of open watches.
func (s *Store) Watchers() int { return int(s.watchers.Load()) }

// WaitVersion blocks until the local version is above newerThan and
// returns that set (for HTTP long polls).
func (s *Store) WaitVersion(ctx context.Context, newerThan uint64) (*rules.Set, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	return s.fsm.waitVersion(ctx, s.stop, newerThan)
}

// Configuration returns the Raft group's members.
func (s *Store) Configuration() ([]ServerInfo, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, s.mapErr(err)
	}
	var out []ServerInfo
	for _, sv := range f.Configuration().Servers {
		out = append(out, ServerInfo{ID: string(sv.ID), Addr: string(sv.Address), Voter: sv.Suffrage == raft.Voter})
	}
	return out, nil
}

// goFunc runs fn on a goroutine that Close joins; false once closed.
func (s *Store) goFunc(fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn()
	}()
	return true
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close shuts Raft down, ends every watch, joins every goroutine the Store
// started and closes the transport and the bolt store. Later calls return
// the first call's result.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return s.closeErr
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()

	s.layer.abortDials() // Shutdown waits for RPCs, a dial to a vanished member among them
	errs := []error{s.raft.Shutdown().Error()}
	s.wg.Wait()
	errs = append(errs, s.trans.Close(), s.bolt.Close())
	s.closeErr = errors.Join(errs...)
	if s.closeErr != nil {
		s.closeErr = fmt.Errorf("rules store: close: %w", s.closeErr)
	}
	close(s.done)
	return s.closeErr
}
