package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/proto/weirv1"
	"github.com/weirlimit/weir/rulesraft"
)

// Limits on what a caller may send.
const (
	// MaxItems is the most items one Check request may carry.
	MaxItems = 10000
	// MaxKeyLen is the longest limited key, in bytes.
	MaxKeyLen = 256
	// DefaultMaxBodyBytes caps HTTP request bodies when Config leaves it 0.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxWait caps HTTP long-polls when Config leaves it 0.
	DefaultMaxWait = 60 * time.Second
	// DefaultMembersPoll is how often WatchMembers looks for changes when
	// Config leaves it 0.
	DefaultMembersPoll = time.Second
)

// ErrConfig is returned by New for an unusable Config or Backend.
var ErrConfig = errors.New("api: invalid config")

// Backend is what the servers need from the node (the node implements it).
type Backend interface {
	// Check decides or forwards items; per-item errors are in the results,
	// one result per item, in order.
	Check(ctx context.Context, items []*weirv1.CheckItem) ([]*weirv1.CheckResult, error)
	// GetLimits reports every rule's quota for one key without taking any.
	GetLimits(ctx context.Context, key string) ([]*weirv1.KeyLimit, error)
	// Members describes the cluster.
	Members(ctx context.Context) (*weirv1.MembersResponse, error)
	// Store is the local rules store (reads, watch, apply on the leader).
	Store() *rulesraft.Store
	// LeaderGRPC is the gRPC address of the current Raft leader, from
	// membership metadata.
	LeaderGRPC() (addr string, ok bool)
	// Ready is nil when the node can serve (leader known, rules loaded).
	Ready() error
	// Gateways is how many gateways watch the cluster (for WatchEvent).
	Gateways() uint32
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
	gateways map[string]int              // gateway id → open watch streams here

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
	s := &Server{cfg: cfg, b: b, metrics: m, conns: map[string]*grpc.ClientConn{}, gateways: map[string]int{}}
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
	return uint32(len(s.gateways))
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

func (s *Server) addGateway(id string) {
	s.mu.Lock()
	s.gateways[id]++
	s.mu.Unlock()
}

func (s *Server) removeGateway(id string) {
	s.mu.Lock()
	if s.gateways[id]--; s.gateways[id] <= 0 {
		delete(s.gateways, id)
	}
	s.mu.Unlock()
}
