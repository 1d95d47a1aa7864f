package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// Limits on what a caller may send.
const (
	// MaxItems is the most items one Check request may carry.
	MaxItems = 10000
	// DefaultMaxBodyBytes caps HTTP request bodies when Config leaves it 0.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxWait caps HTTP long-polls when Config leaves it 0.
	DefaultMaxWait = 60 * time.Second
	// DefaultReadTimeout bounds a read-your-writes read when Config
	// leaves ReadTimeout 0.
	DefaultReadTimeout = 2 * time.Second
	// DefaultMembersPoll is how often WatchMembers looks for changes when
	// Config leaves it 0.
	DefaultMembersPoll = time.Second
)

// ErrConfig is returned by New for an unusable Config or Backend.
var ErrConfig = errors.New("api: invalid config")

// Backend is what both edges (gRPC and HTTP) need from the node, in domain
// terms: no wire format crosses it. The node implements it.
type Backend interface {
	// Check decides or forwards items, which the edge has validated
	// (limit.DecideValid), and writes one result per item into out
	// (len(out) == len(items)), in order; an item that could not be
	// decided has its error in its result. An error fails the whole batch
	// and carries a limit kind (limit.ErrUnavailable when the node has no
	// ring yet or is shutting down). It keeps no reference to items or out
	// once it returns (the edges reuse them).
	Check(ctx context.Context, items []limit.Item, out []limit.Result) error
	// GetLimits reports every rule's quota for one (valid) key without
	// taking any, sorted by rule.
	GetLimits(ctx context.Context, key string) ([]KeyLimit, error)
	// Members describes the cluster.
	Members(ctx context.Context) (Members, error)
	// Rules is the local rules store (reads, watch, apply on the leader).
	Rules() RuleStore
	// LeaderGRPC is the gRPC address of the current Raft leader, from
	// membership metadata.
	LeaderGRPC() (addr string, ok bool)
	// Ready is nil when the node can serve (leader known, rules loaded).
	Ready() error
	// Gateways is how many gateways watch the cluster (for WatchEvent).
	Gateways() uint32
}

// RuleStore is what the edges need of the rules Raft group's local member
// (*rulesraft.Store). Its errors are rulesraft's sentinels, which carry
// limit kinds.
type RuleStore interface {
	// ID is this member's Raft id; Leader the leader's id and Raft address
	// (empty when unknown); IsLeader whether this member leads.
	ID() string
	Leader() (id, addr string)
	IsLeader() bool
	// Current is the local rule set; SetAt the set at an earlier version;
	// History the versions, newest first.
	Current() *rules.Set
	SetAt(version uint64) (*rules.Set, error)
	History(limit int) []rulesraft.HistoryEntry
	// Watch streams the set at every version after from; WaitVersion
	// waits for a version above newerThan.
	Watch(ctx context.Context, from uint64) <-chan rulesraft.Event
	WaitVersion(ctx context.Context, newerThan uint64) (*rules.Set, error)
	// ReadIndex (leader only) is a version covering every write
	// acknowledged before the call; Apply commits a command (leader only).
	ReadIndex(ctx context.Context) (uint64, error)
	Apply(ctx context.Context, cmd rulesraft.Command) (uint64, error)
}

var _ RuleStore = (*rulesraft.Store)(nil)

// KeyLimit is one rule's quota for a key (GetLimits).
type KeyLimit struct {
	Rule   string
	Result limit.Result
}

// Members is the cluster as one node sees it, with the ring configuration
// a gateway needs to compute the same owners.
type Members struct {
	Members           []Member // sorted by ID
	RingVersion       uint64
	PartitionCount    uint32
	ReplicationFactor uint32
	Load              float64
	// RingLayout is the ring's layout (ring.Layout's name), sent to
	// gateways as the RingLayoutHeader of the members calls.
	RingLayout string
	Gateways   uint32
	// NoLeader says why no Raft leader will come when the node knows
	// (a missing --bootstrap-expect or --join); empty otherwise.
	NoLeader string
}

// Member is one node.
type Member struct {
	ID                                       string
	GRPCAddr, HTTPAddr, RaftAddr, GossipAddr string
	// State is alive, suspect, dead, left or leaving.
	State                         string
	PartitionsOwned, ReplicasHeld uint32
	// RaftRole is leader, follower, candidate, nonvoter or none.
	RaftRole string
}

// equal reports whether m and o describe the same cluster.
func (m Members) equal(o Members) bool {
	return m.RingVersion == o.RingVersion && m.PartitionCount == o.PartitionCount &&
		m.ReplicationFactor == o.ReplicationFactor && m.Load == o.Load && m.Gateways == o.Gateways && m.NoLeader == o.NoLeader &&
		slices.Equal(m.Members, o.Members)
}

// Config configures a Server. Zero values take the defaults noted.
type Config struct {
	// AdminToken, when set, is required as "Authorization: Bearer <token>"
	// (gRPC metadata "authorization") on every rule or override write.
	AdminToken string
	// MaxBodyBytes caps HTTP request bodies (default 1 MiB); larger → 413.
	MaxBodyBytes int64
	// MaxWait caps an HTTP long-poll's wait (default 60s).
	MaxWait time.Duration
	// ReadTimeout bounds a read-your-writes read's catching up with the
	// leader (asking its read index and applying up to it), and a
	// follower's wait to apply a write it forwarded (default 2s). A read
	// that cannot catch up in time fails with 503.
	ReadTimeout time.Duration
	// MembersPoll is how often WatchMembers re-reads Backend.Members
	// (default 1s); a stream gets an update only when the answer changed.
	MembersPoll time.Duration
	// NodeID names this node in GET /v1/cluster; empty means the local
	// Store's Raft ID.
	NodeID string
	// Logger receives request errors; nil discards.
	Logger *slog.Logger
	// Registry receives this Server's metrics and is served on /metrics;
	// nil means a private registry.
	Registry *prometheus.Registry
	// Now stamps rule writes and filters expired overrides; nil is time.Now.
	Now func() time.Time
	// DialOptions are used to dial the leader when forwarding writes; nil
	// means plaintext (insecure credentials), as on a private network.
	DialOptions []grpc.DialOption
}

func (c *Config) setDefaults() {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.MembersPoll == 0 {
		c.MembersPoll = DefaultMembersPoll
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Server serves the Limiter, Rules and Cluster gRPC services and the HTTP
// API for one node.
type Server struct {
	cfg     Config
	b       Backend
	metrics *metrics
	handler http.Handler

	ctx    context.Context // canceled by Close; streams and long-polls select on it
	cancel context.CancelFunc
	active sync.WaitGroup // running Watch / WatchMembers / long-poll handlers

	mu       sync.Mutex
	closed   bool
	conns    map[string]*grpc.ClientConn // leader gRPC address → connection
	gateways gatewayWatches              // gateways holding a Watch stream here (rules_service.go)

	limiter limiterService
	rules   rulesService
	cluster clusterService
}

// New returns a Server over b. It registers its metrics on cfg.Registry.
func New(cfg Config, b Backend) (*Server, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil Backend", ErrConfig)
	}
	if cfg.MaxBodyBytes < 0 || cfg.MaxWait < 0 || cfg.MembersPoll < 0 {
		return nil, fmt.Errorf("%w: MaxBodyBytes, MaxWait and MembersPoll must not be negative", ErrConfig)
	}
	cfg.setDefaults()
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("%w: metrics: %w", ErrConfig, err)
	}
	s := &Server{cfg: cfg, b: b, metrics: m, conns: map[string]*grpc.ClientConn{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.limiter = limiterService{s: s}
	s.rules = rulesService{s: s}
	s.cluster = clusterService{s: s}
	s.handler = s.routes()
	return s, nil
}

// Register registers the Limiter, Rules and Cluster services on g.
func (s *Server) Register(g *grpc.Server) {
	weirv1.RegisterLimiterServer(g, &s.limiter)
	weirv1.RegisterRulesServer(g, &s.rules)
	weirv1.RegisterClusterServer(g, &s.cluster)
}

// Handler returns the HTTP API, including /metrics, /healthz and /readyz.
func (s *Server) Handler() http.Handler { return s.handler }

// Gateways is how many distinct gateways (by gateway_id) hold a Watch
// stream on this node now. The node sums it across members for
// Backend.Gateways.
func (s *Server) Gateways() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint32(len(s.gateways.streams))
}

// Close ends Watch, WatchMembers and long-poll handlers, waits for them to
// return and closes the leader connections. Call it before stopping the
// gRPC and HTTP servers. It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.active.Wait()
	s.mu.Lock()
	conns := s.conns
	s.conns = map[string]*grpc.ClientConn{}
	s.mu.Unlock()
	for addr, c := range conns {
		if err := c.Close(); err != nil {
			s.cfg.Logger.Debug("closing leader connection", "addr", addr, "err", err)
		}
	}
}

// track registers a long-running handler; it returns false when the Server
// is closed. The caller must call s.active.Done when it returns.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.active.Add(1)
	return true
}

// bound returns a context canceled when either ctx is or the Server closes.
func (s *Server) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}
