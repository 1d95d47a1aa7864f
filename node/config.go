package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/client/reqmatch"
	"github.com/weirlimit/weir/internal/sched"
	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/limit/headers"
	"github.com/weirlimit/weir/node/membership"
	"github.com/weirlimit/weir/node/rls"
	"github.com/weirlimit/weir/node/security"
	"github.com/weirlimit/weir/region"
	"github.com/weirlimit/weir/ring"
)

// Config.GossipUpgrade values (node/membership's).
const (
	GossipUpgradePlain   = membership.UpgradePlain
	GossipUpgradeEncrypt = membership.UpgradeEncrypt
)

// ErrConfig reports an invalid Config.
var ErrConfig = security.ErrConfig

// Config is everything a node needs. Addresses may use port 0 (tests); the
// node reports the bound addresses. Environment and flags are parsed in cmd.
type Config struct {
	ID      string
	DataDir string

	// Listen addresses. A host may be unspecified (0.0.0.0, "" or ::):
	// then the node advertises Advertise, or else the IP gossip advertises
	// (the gossip bind IP, or the first private IP).
	HTTPAddr   string // HTTP/JSON API, /metrics, /healthz, /readyz
	GRPCAddr   string // gRPC API, health, reflection and peer traffic
	RaftAddr   string // Raft transport (TCP)
	GossipAddr string // memberlist (TCP+UDP)

	// Advertise is the host (an IP or a name, no port) peers and clients
	// reach this node at, for all four listeners, each with its own bound
	// port. A name is resolved when the node starts (retried for up to
	// ResolveTimeout, for DNS records that appear only once the node runs):
	// gossip, gRPC and HTTP advertise that IP, so a node that comes back
	// elsewhere is found at its new address through gossip; Raft
	// advertises the name as given, resolved at every dial. Empty: each
	// listener advertises its bound address, an unspecified host replaced
	// by the IP gossip advertises.
	Advertise string
	// ResolveTimeout bounds how long New retries resolving Advertise.
	ResolveTimeout time.Duration

	// Join lists gossip addresses of existing members (host names are
	// resolved again at every attempt; a name may stand for several
	// members). The node retries with backoff until one answers.
	Join []string
	// BootstrapExpect: wait for this many members and bootstrap the Raft
	// group once (0: never bootstrap; join an existing group).
	BootstrapExpect int
	// AdminToken, when set, is required for rule writes.
	AdminToken string
	// GatewayToken, when set, is the credential gateways send (as a bearer
	// token) to report their decisions and count in fail-open shares;
	// without it and without TLS, reports and watches are bounded per
	// connection (docs/security.md).
	GatewayToken string
	// ReadToken, when set, is a credential for reads that show keys
	// (events, hot keys, the ops snapshot, a key's limits): with it or the
	// admin token set, those need it, the admin token or an admin or node
	// certificate (node/authz, docs/security.md).
	ReadToken string
	// IdleTimeout closes a client connection idle that long: a gRPC
	// connection without a call, an HTTP keep-alive connection between
	// requests (0: DefaultIdleTimeout).
	IdleTimeout time.Duration

	// ClusterName names the cluster: the trust domain of its certificates,
	// spiffe://<ClusterName>/<role>/<name>, the label of its gossip
	// (memberlist drops packets from another cluster) and a key of its node
	// proofs (default "weir").
	ClusterName string
	// TLS names this node's certificate and key and the cluster CA. When
	// set, every listener and connection is mutual TLS 1.3, the
	// certificate must name node/<ID>, and callers are limited to their
	// roles (node/security, node/authz, docs/security.md).
	TLS tlsconf.Files
	// NodeProof, when set, grants the node role to a caller without a node
	// certificate (node/authz.Config.NodeProof).
	NodeProof func(ctx context.Context) (nodeID string, ok bool)
	// GossipKeys is the gossip keyring (32-byte AES keys, the first the
	// primary): gossip is encrypted and verified with it, and peer calls
	// carry proofs derived from it (docs/security.md). Empty, and without
	// TLS: the peer-facing ports bind loopback only.
	GossipKeys [][]byte
	// GossipKeysWritten is when GossipKeys were written (the key file's
	// modification time). The keyring the node persisted in its data dir
	// after `weir keyring` changes wins over GossipKeys unless they were
	// written later (an operator who updated the file after a rotation the
	// node missed). Zero: the persisted keyring wins.
	GossipKeysWritten time.Time
	// GossipUpgrade, only while a running keyless TLS cluster moves onto a
	// gossip key with rolling restarts (docs/operations.md): "plain" holds
	// the key but gossips in plaintext, "encrypt" gossips encrypted; both
	// still accept plaintext gossip and members without a key proof. Empty
	// (the default): encrypted gossip only, members with a proof only.
	GossipUpgrade string
	// HTTPReadTimeout bounds reading one HTTP request, body included
	// (default 30 s).
	HTTPReadTimeout time.Duration

	// Ring is the ring shape (default ring.DefaultConfig, for new
	// clusters). Every member must have the same one: a node of another
	// shape is refused at join. A cluster made before keeps
	// ring.LegacyConfig (RingShape builds one from weir node's flags).
	Ring ring.Config
	// Shards is the number of decision goroutines (default GOMAXPROCS).
	Shards int
	// MaxKeys is the default cap on one rule's live keys on this node, for
	// rules without max_keys (0: 1,000,000). A new key beyond it is not
	// tracked: its check is answered unavailable, so the rule's fail mode
	// applies (docs/design.md, key floods).
	MaxKeys int64
	// AutoLeaseRate is the demand (tokens asked per second) at which the
	// owner starts leasing a key of a rule with lease: auto, when
	// AutoLeaseGateways gateways or more ask for it (0: 100 and 2; see
	// docs/design.md, leases). It stops below half the rate.
	AutoLeaseRate     int64
	AutoLeaseGateways int
	// HeaderStyle picks the rate-limit fields the Envoy rate limit service
	// and /v1/forward-auth answer (headers.Parse; empty: headers.Default).
	HeaderStyle headers.Style
	// RLSEachDescriptor charges every descriptor of a rate limit service
	// request on its own, as envoyproxy/ratelimit does; false (the
	// default) makes a request's descriptors all-or-nothing.
	RLSEachDescriptor bool
	// RLSTrust is what the rate limit service believes of Envoy's negative
	// hits and descriptor limit overrides (zero: neither; rls.Trust).
	RLSTrust rls.Trust
	// ForwardAuthHeaders name the headers /v1/forward-auth reads the API
	// key, user and plan from (empty fields: the SDK's X-API-Key,
	// X-User-ID, X-Plan).
	ForwardAuthHeaders reqmatch.HeaderNames

	// ReplicationInterval is how often changed counters are shipped.
	ReplicationInterval time.Duration
	// ForwardTimeout bounds one forwarded batch to the owner.
	ForwardTimeout time.Duration
	// ForwardMaxBatch caps the items coalesced in one forwarded request.
	ForwardMaxBatch int
	// ForwardInflight is the most forward requests in flight at once on
	// a destination's Peer.ForwardStream (node/forward).
	ForwardInflight int

	// Gossip timing; DefaultConfig is tuned for a LAN.
	GossipProbeInterval time.Duration
	GossipProbeTimeout  time.Duration
	GossipInterval      time.Duration
	GossipSuspicionMult int

	// Raft timing (LAN defaults).
	RaftHeartbeatTimeout time.Duration
	RaftElectionTimeout  time.Duration

	// LeaveTimeout bounds a graceful leave (hand-off of owned partitions).
	LeaveTimeout time.Duration
	// PersistInterval is how often the durable counters (an idle deadline
	// an hour or more away, rules without durable: off) this node owns or
	// holds copies of are written to DataDir; they are also written at the
	// end of a leave. A full-cluster stop loses at most the decisions of
	// the last interval (docs/design.md, Durable counters).
	PersistInterval time.Duration
	// RestoreWait is how long a node that loaded durable counters waits
	// for the members it wrote them with before it forms a ring without
	// them (it answers unavailable meanwhile).
	RestoreWait time.Duration

	// GRPCReflection registers gRPC server reflection, so generic clients
	// (grpcurl) can list and call the services.
	GRPCReflection bool

	// PeerDialer, when set, opens this node's gRPC connections to its peers
	// (forwarding, replication, hand-off) instead of a plain TCP dial. Tests
	// pass a fault-injecting dialer here; nil costs nothing.
	PeerDialer func(ctx context.Context, addr string) (net.Conn, error)
	// WrapGossip, when set, wraps the memberlist transport this node gossips
	// through (tests drop packets and streams to cut a node off). Nil: the
	// plain transport.
	WrapGossip func(memberlist.Transport) memberlist.Transport
	// WithoutFeatures lists rule features (rules.Features) this node does
	// not advertise in gossip, as a binary of an older version would not:
	// tests of the mixed-version refusal of rule writes. Nil: all.
	WithoutFeatures []string

	// Region, when Region.Region is set, makes this node part of a region
	// that shares global rules' quotas with its peer regions (package
	// region; docs/operations.md, regions). The node adds its own peer
	// dial options (TLS when configured) and logger.
	Region region.Config
	// RegionDialer, when set, opens the region agent's connections (tests
	// add cross-region latency or cut regions apart).
	RegionDialer func(ctx context.Context, addr string) (net.Conn, error)

	Logger   *slog.Logger
	Registry *prometheus.Registry
	// Tracer, when set, traces sampled checks (docs/operations.md,
	// tracing): a span where a check enters, one per forward batch that
	// carries a sampled item, one for the owner's decision. Nil: off.
	Tracer trace.TracerProvider
	// Now is the owner's clock in unix ns (tests may pass a fake).
	Now func() int64
	// Sched is the seam through which the hand-off, the replicator and
	// the shard engine start work and make timers, and Boot is drawn.
	// Nil: production (sched.Real).
	Sched sched.Sched
}

// DefaultConfig returns a config for one node on loopback with the given id.
func DefaultConfig(id string) Config {
	return Config{
		ID:                   id,
		HTTPAddr:             "127.0.0.1:8080",
		GRPCAddr:             "127.0.0.1:9090",
		RaftAddr:             "127.0.0.1:7000",
		GossipAddr:           "127.0.0.1:7946",
		Ring:                 ring.DefaultConfig(),
		Shards:               runtime.GOMAXPROCS(0),
		ReplicationInterval:  5 * time.Millisecond,
		ForwardTimeout:       500 * time.Millisecond,
		ForwardMaxBatch:      1024,
		ForwardInflight:      4,
		GossipProbeInterval:  500 * time.Millisecond,
		GossipProbeTimeout:   200 * time.Millisecond,
		GossipInterval:       100 * time.Millisecond,
		GossipSuspicionMult:  3,
		RaftHeartbeatTimeout: 500 * time.Millisecond,
		RaftElectionTimeout:  500 * time.Millisecond,
		LeaveTimeout:         10 * time.Second,
		PersistInterval:      time.Second,
		RestoreWait:          2 * time.Minute,
		ResolveTimeout:       time.Minute,
		GRPCReflection:       true,
		ClusterName:          "weir",
		HTTPReadTimeout:      30 * time.Second,
		IdleTimeout:          DefaultIdleTimeout,
	}
}

// DefaultIdleTimeout is Config.IdleTimeout's default.
const DefaultIdleTimeout = 5 * time.Minute

// securitySettings are the settings node/security validates and loads
// the keys from.
func (c Config) securitySettings() security.Settings {
	return security.Settings{ClusterName: c.ClusterName, TLS: c.TLS.Set(), Keys: c.GossipKeys, KeysWritten: c.GossipKeysWritten,
		Upgrade: c.GossipUpgrade, HTTPReadTimeout: c.HTTPReadTimeout, DataDir: c.DataDir,
		GossipAddr: c.GossipAddr, RaftAddr: c.RaftAddr, Advertise: c.Advertise}
}

// idleTimeout is IdleTimeout or its default.
func (c Config) idleTimeout() time.Duration {
	if c.IdleTimeout > 0 {
		return c.IdleTimeout
	}
	return DefaultIdleTimeout
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.ID == "" {
		return fmt.Errorf("%w: id is required", ErrConfig)
	}
	if c.DataDir == "" {
		return fmt.Errorf("%w: data dir is required", ErrConfig)
	}
	for name, a := range map[string]string{"http": c.HTTPAddr, "grpc": c.GRPCAddr, "raft": c.RaftAddr, "gossip": c.GossipAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%w: %s address %q: %v", ErrConfig, name, a, err)
		}
	}
	if c.Advertise != "" {
		ip := net.ParseIP(c.Advertise)
		if ip == nil && strings.ContainsAny(c.Advertise, ":/[] ") {
			return fmt.Errorf("%w: advertise %q: want an IP or a host name, without a port", ErrConfig, c.Advertise)
		}
		if ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("%w: advertise %q: want an address peers can reach", ErrConfig, c.Advertise)
		}
	}
	if err := c.TLS.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.ClusterName == "" || strings.ContainsAny(c.ClusterName, "/:@?# ") {
		return fmt.Errorf("%w: cluster name %q: want a non-empty name without '/', ':' or spaces", ErrConfig, c.ClusterName)
	}
	if err := c.securitySettings().Validate(); err != nil {
		return err
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("%w: idle timeout must be >= 0", ErrConfig)
	}
	if c.BootstrapExpect < 0 {
		return fmt.Errorf("%w: bootstrap-expect must be >= 0", ErrConfig)
	}
	if err := c.Ring.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.Shards < 1 {
		return fmt.Errorf("%w: shards must be >= 1", ErrConfig)
	}
	if c.MaxKeys < 0 {
		return fmt.Errorf("%w: max keys must be >= 0", ErrConfig)
	}
	if c.AutoLeaseRate < 0 || c.AutoLeaseGateways < 0 || c.AutoLeaseGateways > 64 {
		return fmt.Errorf("%w: auto lease rate must be >= 0 and gateways in [0, 64]", ErrConfig)
	}
	if _, err := headers.Parse(string(c.HeaderStyle)); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.ReplicationInterval <= 0 || c.ForwardTimeout <= 0 || c.LeaveTimeout <= 0 || c.ResolveTimeout < 0 {
		return fmt.Errorf("%w: intervals and timeouts must be > 0", ErrConfig)
	}
	if c.PersistInterval <= 0 || c.RestoreWait <= 0 {
		return fmt.Errorf("%w: persist interval and restore wait must be > 0", ErrConfig)
	}
	if c.ForwardMaxBatch < 1 || c.ForwardInflight < 1 {
		return fmt.Errorf("%w: forward batch and inflight must be >= 1", ErrConfig)
	}
	if c.Region.Region != "" || len(c.Region.Peers) > 0 {
		if err := c.Region.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	return nil
}

// RingShape is the ring shape weir node's flags give: partitions (the
// partition count), vnodes (virtual nodes per member) and layout
// ("balanced" or "consistent", ring.Layout), validated.
func RingShape(partitions, vnodes int, layout string) (ring.Config, error) {
	c := ring.DefaultConfig()
	c.PartitionCount, c.ReplicationFactor = partitions, vnodes
	l, err := ring.ParseLayout(layout)
	switch {
	case err != nil:
		return c, fmt.Errorf("ring layout %q: want balanced or consistent", layout)
	case partitions < 1 || partitions > ring.MaxPartitionCount:
		return c, fmt.Errorf("partitions %d: want 1 to %d", partitions, ring.MaxPartitionCount)
	case vnodes < 1 || vnodes > ring.MaxReplicationFactor:
		return c, fmt.Errorf("vnodes %d: want 1 to %d", vnodes, ring.MaxReplicationFactor)
	}
	c.Layout = l
	return c, c.Validate()
}
