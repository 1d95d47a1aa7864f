package node

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/node/authz"
	"github.com/weirlimit/weir/node/clusterview"
	"github.com/weirlimit/weir/node/identity"
	"github.com/weirlimit/weir/ring"
	"github.com/weirlimit/weir/rulesraft"
)

// keyringFile is where a node keeps its gossip keyring in its data dir once
// `weir keyring` changed it, so a restart keeps the change.
const keyringFile = "gossip-keyring"

// peerMethods and regionMethods prefix the gRPC methods only nodes may
// call (of this cluster, or of a peer region sharing its keyring).
const (
	peerMethods   = "/weir.v1.Peer/"
	regionMethods = "/weir.v1.Region/"
)

func (c Config) validateSecurity() error {
	if c.ClusterName == "" || len(c.ClusterName) > 128 {
		return fmt.Errorf("%w: cluster name must be 1 to 128 bytes", ErrConfig)
	}
	for i, k := range c.GossipKeys {
		if len(k) != peerauth.KeySize {
			return fmt.Errorf("%w: gossip key %d is %d bytes, want %d", ErrConfig, i+1, len(k), peerauth.KeySize)
		}
	}
	if c.HTTPReadTimeout < 0 {
		return fmt.Errorf("%w: http read timeout must be >= 0", ErrConfig)
	}
	switch c.GossipUpgrade {
	case "":
	case GossipUpgradePlain, GossipUpgradeEncrypt:
		if !c.TLS.Set() {
			return fmt.Errorf("%w: gossip upgrade %q is for a TLS cluster moving onto a gossip key (without TLS, keyless nodes gossip on loopback only)", ErrConfig, c.GossipUpgrade)
		}
	default:
		return fmt.Errorf("%w: gossip upgrade %q: want %q or %q", ErrConfig, c.GossipUpgrade, GossipUpgradePlain, GossipUpgradeEncrypt)
	}
	return nil
}

// errNoGossipKey is a node told to gossip on an address other hosts reach
// without a gossip key: anyone who can send it a UDP packet could forge
// membership (declare members dead, split the cluster).
func errNoGossipKey(addr string) error {
	return fmt.Errorf("%w: gossip on %s (not loopback) needs a gossip key, or anyone who reaches the port can forge membership: "+
		"make one with `weir keyring generate --out FILE` (`weir tls cert create --node ...` writes DIR/gossip-keyring too) "+
		"and start every node with --gossip-key-file FILE, or bind --gossip to 127.0.0.1", ErrConfig, addr)
}

// peersAuthenticated reports whether the node's peers prove they are nodes
// of the cluster: with a gossip key, or with TLS (a node certificate).
func (c Config) peersAuthenticated() bool { return len(c.GossipKeys) > 0 || c.TLS.Set() }

// setupKeys loads the keyring (the one persisted in the data dir wins
// over cfg.GossipKeys unless they were written later) and, when peers cannot prove who they are, binds the
// peer-facing listeners (gossip, Raft) to loopback. With TLS and no key,
// gossip must bind loopback: it refuses another address (errNoGossipKey).
// It returns the adjusted config and the keyring (nil without a gossip
// key).
func setupKeys(cfg Config, log *slog.Logger) (Config, *memberlist.Keyring, error) {
	path := filepath.Join(cfg.DataDir, keyringFile)
	switch keys, err := peerauth.ReadKeyringFile(path); {
	case err == nil:
		st, serr := os.Stat(path)
		switch {
		case len(cfg.GossipKeys) == 0:
			log.Warn("gossip keyring found in the data dir but no gossip key configured: using the data dir's", "file", path)
			cfg.GossipKeys = keys
		case serr == nil && !cfg.GossipKeysWritten.IsZero() && cfg.GossipKeysWritten.After(st.ModTime()):
			log.Warn("the configured gossip keyring is newer than the one persisted in the data dir: using the configured one", "file", path)
		default:
			log.Info("using the gossip keyring persisted in the data dir (written by weir keyring); the configured keys are older", "file", path)
			cfg.GossipKeys = keys
		}
	case !errors.Is(err, os.ErrNotExist):
		return cfg, nil, fmt.Errorf("node: %w", err)
	}
	if !cfg.peersAuthenticated() {
		changed := false
		for _, a := range []*string{&cfg.GossipAddr, &cfg.RaftAddr} {
			if l, ok := loopbackAddr(*a); ok {
				*a, changed = l, true
			}
		}
		if cfg.Advertise != "" && !isLoopbackHost(cfg.Advertise) {
			cfg.Advertise, changed = "", true
		}
		if changed {
			log.Warn("no gossip key and no TLS: gossip and Raft listen on loopback only and peer calls are accepted from loopback only; set --gossip-key-file to form a cluster across machines",
				"gossip", cfg.GossipAddr, "raft", cfg.RaftAddr)
		} else {
			log.Info("no gossip key and no TLS: peer-facing ports are on loopback only")
		}
		return cfg, nil, nil
	}
	if len(cfg.GossipKeys) == 0 { // TLS without a gossip key: only on loopback (certificates cannot sign UDP gossip)
		if host, _, err := net.SplitHostPort(cfg.GossipAddr); err != nil || !isLoopbackHost(host) {
			return cfg, nil, errNoGossipKey(cfg.GossipAddr)
		}
		if cfg.GossipUpgrade != "" {
			return cfg, nil, fmt.Errorf("%w: gossip upgrade %q needs the gossip key (--gossip-key-file)", ErrConfig, cfg.GossipUpgrade)
		}
		return cfg, nil, nil
	}
	kr, err := memberlist.NewKeyring(cfg.GossipKeys, cfg.GossipKeys[0])
	if err != nil {
		return cfg, nil, fmt.Errorf("%w: gossip keyring: %v", ErrConfig, err)
	}
	return cfg, kr, nil
}

// loopbackAddr returns addr with a loopback host, and whether that changed
// it.
func loopbackAddr(addr string) (string, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || isLoopbackHost(host) {
		return addr, false
	}
	return net.JoinHostPort("127.0.0.1", port), true
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// PeerVerifier is the node proof check of the Peer service without TLS:
// with a gossip key, a valid token from a key of the keyring; without
// one, a caller on loopback. (With TLS, the authorization layer checks
// the node certificate instead; see peerGuard.)
func (n *Node) PeerVerifier() peerauth.Verifier {
	if n.auth != nil {
		return n.auth.Verify
	}
	return peerauth.LoopbackOnly
}

// peerGuard refuses, without TLS, Peer calls that carry no node proof
// (with TLS, node/authz admits node certificates only).
func (n *Node) peerGuard() []grpc.ServerOption {
	if n.tls != nil {
		return nil
	}
	return n.peerServerOptions()
}

// peerServerOptions refuse Peer calls that carry no node proof.
// A refusal is logged at most every 10 s.
func (n *Node) peerServerOptions() []grpc.ServerOption {
	refused := func(ctx context.Context, method string) {
		n.refused.WithLabelValues("peer_call").Inc()
		now := time.Now().UnixNano()
		if last := n.refusedLogged.Load(); now-last > int64(10*time.Second) && n.refusedLogged.CompareAndSwap(last, now) {
			from := "unknown"
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				from = p.Addr.String()
			}
			n.log.Warn("peer call without a valid node proof refused", "method", method, "from", from)
		}
	}
	return append(peerauth.Guard(peerMethods, n.PeerVerifier(), refused), peerauth.Guard(regionMethods, n.PeerVerifier(), refused)...)
}

// peerCallOptions attach this node's proof to every peer call.
func (n *Node) peerCallOptions() []grpc.DialOption {
	if n.auth == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithPerRPCCredentials(n.auth.Credentials(n.cfg.ID))}
}

// memberProof is the proof this node gossips in its metadata ("" without
// a gossip key).
func (n *Node) memberProof() string {
	if n.auth == nil {
		return ""
	}
	return base64.RawStdEncoding.EncodeToString(n.auth.MemberProof(n.cfg.ID, n.cluster.Meta().Boot))
}

// provenMember reports whether a gossip member proved it holds a key of
// the keyring (always true without a gossip key). A member that did not
// is logged at most every 10 s and kept out of the ring and Raft.
func (n *Node) provenMember(id string, mm member) bool {
	if n.auth == nil {
		return true
	}
	if mm.Proof == "" && n.cfg.GossipUpgrade != "" {
		return true // a keyless member of a TLS cluster moving onto the key: its certificate admits it (security.go)
	}
	p, err := base64.RawStdEncoding.DecodeString(mm.Proof)
	if err == nil && n.auth.VerifyMember(id, mm.Boot, p) {
		return true
	}
	n.refused.WithLabelValues("gossip_member").Inc()
	now := time.Now().UnixNano()
	if last := n.unprovenLogged.Load(); now-last > int64(10*time.Second) && n.unprovenLogged.CompareAndSwap(last, now) {
		n.log.Warn("gossip member without a valid node proof ignored (not in the ring, not a Raft voter)", "member", id)
	}
	return false
}

// newHTTPServer bounds what a client may hold: the headers within 10 s,
// the whole request (body included) within HTTPReadTimeout, an idle
// keep-alive connection for IdleTimeout. A slow client that never sends its
// body is dropped at the read timeout. The keep-alive idle time is
// Config.IdleTimeout. (Answers are not bounded: a rules
// long poll waits up to a minute by design; the timeout covers reading
// only, and does not end a handler that is still waiting.)
func (n *Node) newHTTPServer(h http.Handler) *http.Server {
	rt := n.cfg.HTTPReadTimeout
	if rt == 0 {
		rt = 30 * time.Second
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(10*time.Second, rt),
		ReadTimeout:       rt,
		IdleTimeout:       n.cfg.idleTimeout(),
		MaxHeaderBytes:    64 << 10,
	}
}

// maxReplicaStates caps the replica copies a node holds (about 100 bytes
// each): far above what the owners' key caps let them ship in practice,
// low enough that a misbehaving peer cannot exhaust memory.
const maxReplicaStates = 4 << 20

// raftHandshake makes every Raft connection open with this node's proof
// and refuses one without a valid proof (with a gossip key and no TLS;
// with TLS the node certificates do it, and without either, Raft listens
// on loopback only). It also turns on the checks of every inbound Raft
// request (rulesraft/rpccheck.go): a request names the node its
// connection proved, an admitted member at the Raft address gossip gives
// it.
func (n *Node) raftHandshake(rc *rulesraft.Config) {
	rc.Members = raftMembers{n}
	rc.RefusedRPC = func() { n.refused.WithLabelValues("raft_rpc").Inc() }
	if n.tls != nil {
		rc.PeerID = func(cs tls.ConnectionState) (string, bool) {
			id, ok := tlsconf.FromPeerCerts(cs.PeerCertificates)
			return id.Name, ok && id.Role == tlsconf.RoleNode && id.Cluster == n.cfg.ClusterName && id.Name != ""
		}
		return
	}
	if n.auth == nil {
		return
	}
	rc.Hello = func() []byte { return []byte(n.auth.Token(n.cfg.ID)) }
	rc.CheckHello = func(b []byte) (string, bool) {
		id, ok := n.auth.VerifyToken(string(b))
		if !ok {
			n.refused.WithLabelValues("raft").Inc()
		}
		return id, ok && id != ""
	}
}

// raftMembers is rulesraft.Members over this node's gossip view.
type raftMembers struct{ n *Node }

// RaftAddr is the Raft address of id while it is an admitted member: live
// in gossip and admitted now, or in the current view (which lags one that
// just left by a gossip round).
func (m raftMembers) RaftAddr(id string) (string, bool) {
	n := m.n
	mm, live := n.cluster.Lookup(id)
	if live && n.admittedNow(id, mm) {
		return mm.Raft, true
	}
	if v := n.cluster.View(); v != nil {
		if mm, ok := v.Members[id]; ok {
			return mm.Raft, true
		}
	}
	return "", false
}

// callerIs refuses a peer call that names another node than the one its
// proof names (Replicate's sender, Handoff's puller): a node speaks for
// itself only. Callers admitted as loopback (no gossip key) name none.
func (n *Node) callerIs(ctx context.Context, claimed string) error {
	id, err := n.caller(ctx)
	if err != nil {
		return err
	}
	return n.speaksFor(id, claimed)
}

// caller is the node id ctx's proof names: the node certificate or proof
// node/authz found (with TLS, only a certificate counts).
func (n *Node) caller(ctx context.Context) (string, error) {
	if c := authz.FromContext(ctx); c.Node && (c.HasCert || n.tls == nil) {
		return c.NodeID, nil
	}
	if n.tls != nil {
		return "", status.Error(codes.Unauthenticated, "node: peer call without a node certificate")
	}
	id, ok := n.PeerVerifier()(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "node: peer call without a valid node proof")
	}
	return id, nil
}

// callerAdmitted refuses a peer call unless the node ctx's proof names is
// a member (identity.Guard.Member): a node credential acts only as the
// member it names, and only while it is one.
func (n *Node) callerAdmitted(ctx context.Context) error {
	if n.auth == nil && n.tls == nil {
		return nil
	}
	id, err := n.caller(ctx)
	if err != nil {
		return err
	}
	return n.ids.Member(ctx, id)
}

// newIdentityGuard binds node credentials to this node's membership
// (node/identity), once setupSecurity has decided whether callers carry
// any.
func (n *Node) newIdentityGuard() *identity.Guard {
	return identity.New(identity.Config{
		On:         n.auth != nil || n.tls != nil,
		Members:    identityMembers{n},
		Refused:    func(kind string) { n.refused.WithLabelValues(kind).Inc() },
		MemberWait: time.Second,             // a member that just joined calls a gossip round before this node hears
		AskWait:    1500 * time.Millisecond, // well under the asker's AskTimeout (3 s)
	})
}

// identityMembers is identity.Membership over this node's view and gossip.
type identityMembers struct{ n *Node }

// Member: in the current view (one atomic load) or live in gossip (the
// view lags a member that just joined). Under TLS, admission binds
// gossip's entry for id to the certificate that names it (security.go).
func (m identityMembers) Member(id string) bool {
	if v := m.n.cluster.View(); v != nil {
		if _, ok := v.Members[id]; ok {
			return true
		}
	}
	_, live := m.n.cluster.Lookup(id)
	return live
}

func (m identityMembers) Ring() *ring.Ring {
	if v := m.n.cluster.View(); v != nil {
		return v.Ring
	}
	return nil
}

// AdmittedRing is the ring of the members gossip reports and admission
// admits now (this node as leaving while it leaves).
func (m identityMembers) AdmittedRing() *ring.Ring {
	n := m.n
	members := map[string]member{}
	for id, mm := range n.cluster.ReadMembers() {
		if n.admittedNow(id, mm) {
			members[id] = mm
		}
	}
	if mm, ok := members[n.cfg.ID]; ok && n.cluster.Leaving() {
		mm.Leaving = true
		members[n.cfg.ID] = mm
	}
	r, err := ring.New(clusterview.RingMembers(members, ""), n.cfg.Ring)
	if err != nil {
		return nil
	}
	return r
}

func (n *Node) speaksFor(id, claimed string) error {
	if (n.auth != nil || n.tls != nil) && id != claimed {
		return status.Errorf(codes.PermissionDenied, "node: the caller proved it is %q but speaks for %q", id, claimed)
	}
	return nil
}

// newRefusals counts what was kept out for want of a valid node proof.
func newRefusals(reg *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weir_node_proof_refusals_total",
		Help: "What was refused for want of a valid node proof: peer_call (a gRPC Peer call), raft (a Raft connection), gossip_member (gossip metadata of a member), non_member (a node credential naming no admitted member), handoff_parts (a hand-off ask for partitions the asker cannot own or hold), raft_rpc (a Raft RPC whose sender is not who its connection proved, or not allowed it).",
	}, []string{"kind"})
	for _, k := range []string{"peer_call", "raft", "gossip_member", "non_member", "handoff_parts", "raft_rpc"} {
		c.WithLabelValues(k)
	}
	reg.MustRegister(c)
	return c
}
