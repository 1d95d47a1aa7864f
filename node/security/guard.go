package security

import (
	"context"
	"crypto/tls"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/node/authz"
	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/node/identity"
	"github.com/weirlimit/weir/ring"
)

// Config is what the security part reads of the node's configuration.
type Config struct {
	ID          string
	ClusterName string
	DataDir     string // where the keyring file lives
	// Boot is this run's boot id, which the member proof covers.
	Boot uint64
	// TLS names the node's certificate, key and the cluster CA (unset: no
	// TLS).
	TLS tlsconf.Files
	// The tokens of the roles (node/authz).
	AdminToken, GatewayToken, ReadToken string
	// NodeProof, when set, grants the node role to a caller without a node
	// certificate (authz.Config.NodeProof).
	NodeProof func(ctx context.Context) (nodeID string, ok bool)
	// GossipUpgrade is set while a keyless TLS cluster moves onto a gossip
	// key (GossipUpgradePlain, GossipUpgradeEncrypt).
	GossipUpgrade string
	// Keyring is the gossip keyring (LoadKeys); nil without a gossip key.
	Keyring *memberlist.Keyring
	// Ring is the ring configuration (the identity guard's admitted ring).
	Ring ring.Config
	// IdleTimeout closes a connection idle that long; HTTPReadTimeout
	// bounds reading one HTTP request (0: 30 s).
	IdleTimeout, HTTPReadTimeout time.Duration
	// PeerDialer, when set, opens the connections of member verifications.
	PeerDialer func(ctx context.Context, addr string) (net.Conn, error)
	// ReadProof checks a node's read proof (authz.Config.ReadProof).
	ReadProof func(proof string) bool
	// Ctx ends verifications; Go runs one on a goroutine its caller joins.
	Ctx context.Context
	Go  func(func())
	// Logger and Registry: where the part logs and counts refusals.
	Logger   *slog.Logger
	Registry prometheus.Registerer
}

// Members is what security reads of membership.
type Members interface {
	// Live is gossip's live members by id (a copy the caller may change).
	Live() map[string]clusterview.Member
	// Gossiped is gossip's live entry for id.
	Gossiped(id string) (clusterview.Member, bool)
	// Viewed is id's entry in the current view (the members of the ring
	// in use), which lags gossip by a round.
	Viewed(id string) (clusterview.Member, bool)
	// Ring is the current view's ring (nil before the first view).
	Ring() *ring.Ring
	// Leaving reports whether this node is handing its partitions off.
	Leaving() bool
	// Changed signals that admission changed (the view is to be rebuilt).
	// It never blocks.
	Changed()
	// Announce gossips this node's metadata again (its member proof
	// changed with a new primary key).
	Announce() error
}

// Guard is the security part of one node.
type Guard struct {
	cfg     Config
	log     *slog.Logger
	members Members

	tls     *tlsconf.Source   // nil without TLS
	authz   *authz.Authorizer // the role policy
	admit   *admission        // members that proved they are nodes (TLS)
	keyring *memberlist.Keyring
	auth    *peerauth.Authenticator // node proofs from keyring; nil without
	ids     *identity.Guard         // node credentials bound to membership
	refused *prometheus.CounterVec  // weir_node_proof_refusals_total

	keyringMu      sync.Mutex   // serializes keyring changes and their file
	unprovenLogged atomic.Int64 // unix ns of the last unproven-member warning
	refusedLogged  atomic.Int64 // unix ns of the last refused-peer-call warning
}

// New loads the TLS files (Config.TLS), checks that the certificate names
// this node, and builds the authorizer, the proofs and the identity guard.
// Called before anything listens or dials.
func New(cfg Config, members Members) (*Guard, error) {
	g := &Guard{cfg: cfg, log: cfg.Logger, members: members, keyring: cfg.Keyring, admit: newAdmission()}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if cfg.TLS.Set() {
		src, err := tlsconf.New(cfg.TLS, cfg.ClusterName, g.log.With("component", "tls"))
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		want := tlsconf.Identity{Cluster: cfg.ClusterName, Role: tlsconf.RoleNode, Name: cfg.ID}
		if id := src.Identity(); id != want {
			return nil, fmt.Errorf("%w: certificate %s names %s; a node's certificate must name %s", ErrConfig, cfg.TLS.Cert, id, want)
		}
		src.Pin()
		g.tls = src
	}
	if cfg.Keyring != nil {
		g.auth = peerauth.New(cfg.ClusterName, cfg.Keyring)
	}
	g.refused = newRefusals(cfg.Registry)
	proof := cfg.NodeProof
	if proof == nil && g.tls == nil && g.auth != nil {
		proof = g.auth.Verify // a gossip key's node proof
	}
	g.authz = authz.New(authz.Config{
		TLS:          g.tls != nil,
		AdminToken:   cfg.AdminToken,
		GatewayToken: cfg.GatewayToken,
		ReadToken:    cfg.ReadToken,
		ReadProof:    cfg.ReadProof,
		NodeProof:    proof,
		Logger:       g.log.With("component", "authz"),
	})
	g.ids = g.newIdentityGuard()
	return g, nil
}

// TLS is the node's TLS source (nil without TLS).
func (g *Guard) TLS() *tlsconf.Source { return g.tls }

// Authenticator makes and checks node proofs from the gossip keyring (nil
// without a gossip key).
func (g *Guard) Authenticator() *peerauth.Authenticator { return g.auth }

// Authorizer is the role policy in front of both servers.
func (g *Guard) Authorizer() *authz.Authorizer { return g.authz }

// secured reports whether any of TLS, a token, a gossip key or a node
// proof is on.
func (g *Guard) secured() bool {
	c := g.cfg
	return g.tls != nil || c.AdminToken != "" || c.NodeProof != nil || g.auth != nil || c.GatewayToken != "" || c.ReadToken != ""
}

// ServerOptions are the gRPC server's credentials and authorization
// interceptors (none when nothing is configured: an open node), after the
// Peer guard (PeerGuard), so an outsider is refused as unauthenticated and
// counted before the role policy runs.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	// A connection without a call for IdleTimeout is closed (GOAWAY).
	opts := append(g.peerGuard(), grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: g.cfg.IdleTimeout}))
	if g.secured() {
		opts = append(opts, grpc.ChainUnaryInterceptor(g.authz.UnaryInterceptor()), grpc.ChainStreamInterceptor(g.authz.StreamInterceptor()))
	}
	if g.tls != nil {
		opts = append(opts, grpc.Creds(tlsconf.ServerCredentials(g.tls.ServerConfig(), g.log.With("component", "grpc"))))
	}
	return opts
}

// PeerCreds are the credentials of this node's connections to other
// nodes: TLS presenting its node certificate and accepting only node
// certificates, or plaintext.
func (g *Guard) PeerCreds() grpc.DialOption {
	if g.tls == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(g.tls.ClientConfig(tlsconf.RoleNode)))
}

// PeerTLS is the client TLS of this node's HTTP calls to other members
// (nil without TLS).
func (g *Guard) PeerTLS() *tls.Config {
	if g.tls == nil {
		return nil
	}
	return g.tls.ClientConfig(tlsconf.RoleNode)
}

// RaftTLS is the Raft transport's TLS (nil, nil without TLS): only nodes
// on either side.
func (g *Guard) RaftTLS() (server, client *tls.Config) {
	if g.tls == nil {
		return nil, nil
	}
	return g.tls.ServerConfig(tlsconf.RoleNode), g.tls.ClientConfig(tlsconf.RoleNode)
}

// NewHTTPServer serves h behind the authorization middleware and, with
// TLS, over HTTPS with client certificates (callers without one reach
// /healthz and /readyz only, node/authz). It bounds what a client may
// hold: the headers within 10 s, the whole request (body included) within
// HTTPReadTimeout, an idle keep-alive connection for IdleTimeout. A slow
// client that never sends its body is dropped at the read timeout.
// (Answers are not bounded: a rules long poll waits up to a minute by
// design; the timeout covers reading only.)
func (g *Guard) NewHTTPServer(h http.Handler) *http.Server {
	rt := g.cfg.HTTPReadTimeout
	if rt == 0 {
		rt = 30 * time.Second
	}
	if g.secured() {
		h = g.authz.Middleware(h)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(10*time.Second, rt),
		ReadTimeout:       rt,
		IdleTimeout:       g.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	if g.tls != nil {
		srv.TLSConfig = g.tls.ServerConfigOptionalClient()
		srv.ErrorLog = stdlog.New(tlsconf.ErrorLog(g.log.With("component", "http")), "", 0)
	}
	return srv
}

// ServeHTTP serves srv (from NewHTTPServer) on lis, over TLS when
// configured.
func (g *Guard) ServeHTTP(srv *http.Server, lis net.Listener) error {
	if g.tls != nil {
		return srv.ServeTLS(lis, "", "")
	}
	return srv.Serve(lis)
}

// newRefusals counts what was kept out for want of a valid node proof.
func newRefusals(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weir_node_proof_refusals_total",
		Help: "What was refused for want of a valid node proof: peer_call (a gRPC Peer call), raft (a Raft connection), gossip_member (gossip metadata of a member), non_member (a node credential naming no admitted member), handoff_parts (a hand-off ask for partitions the asker cannot own or hold), raft_rpc (a Raft RPC whose sender is not who its connection proved, or not allowed it).",
	}, []string{"kind"})
	for _, k := range []string{"peer_call", "raft", "gossip_member", "non_member", "handoff_parts", "raft_rpc"} {
		c.WithLabelValues(k)
	}
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}
