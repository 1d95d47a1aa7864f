package security

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"time"

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

// peerMethods and regionMethods prefix the gRPC methods only nodes may
// call (of this cluster, or of a peer region sharing its keyring).
const (
	peerMethods   = "/weir.v1.Peer/"
	regionMethods = "/weir.v1.Region/"
)

// logEvery is how often, at most, a kind of refusal is logged.
const logEvery = int64(10 * time.Second)

// PeerVerifier is the node proof check of the Peer service without TLS:
// with a gossip key, a valid token from a key of the keyring; without
// one, a caller on loopback. (With TLS, the authorization layer checks
// the node certificate instead.)
func (g *Guard) PeerVerifier() peerauth.Verifier {
	if g.auth != nil {
		return g.auth.Verify
	}
	return peerauth.LoopbackOnly
}

// peerGuard refuses, without TLS, Peer calls that carry no node proof
// (with TLS, node/authz admits node certificates only).
func (g *Guard) peerGuard() []grpc.ServerOption {
	if g.tls != nil {
		return nil
	}
	return g.PeerServerOptions()
}

// PeerServerOptions refuse Peer calls that carry no node proof.
// A refusal is logged at most every 10 s.
func (g *Guard) PeerServerOptions() []grpc.ServerOption {
	refused := func(ctx context.Context, method string) {
		g.refused.WithLabelValues("peer_call").Inc()
		now := time.Now().UnixNano()
		if last := g.refusedLogged.Load(); now-last > logEvery && g.refusedLogged.CompareAndSwap(last, now) {
			from := "unknown"
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				from = p.Addr.String()
			}
			g.log.Warn("peer call without a valid node proof refused", "method", method, "from", from)
		}
	}
	return append(peerauth.Guard(peerMethods, g.PeerVerifier(), refused), peerauth.Guard(regionMethods, g.PeerVerifier(), refused)...)
}

// PeerCallOptions attach this node's proof to every peer call.
func (g *Guard) PeerCallOptions() []grpc.DialOption {
	if g.auth == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithPerRPCCredentials(g.auth.Credentials(g.cfg.ID))}
}

// MemberProof is the proof this node gossips in its metadata ("" without
// a gossip key).
func (g *Guard) MemberProof() string {
	if g.auth == nil {
		return ""
	}
	return base64.RawStdEncoding.EncodeToString(g.auth.MemberProof(g.cfg.ID, g.cfg.Boot))
}

// ProvenMember reports whether a gossip member (its Boot and Proof)
// proved it holds a key of the keyring (always true without a gossip
// key). A member that did not is logged at most every 10 s and kept out
// of the ring and Raft.
func (g *Guard) ProvenMember(id string, m clusterview.Member) bool {
	if g.auth == nil {
		return true
	}
	if m.Proof == "" && g.cfg.GossipUpgrade != "" {
		return true // a keyless member of a TLS cluster moving onto the key: its certificate admits it (Admitted)
	}
	p, err := base64.RawStdEncoding.DecodeString(m.Proof)
	if err == nil && g.auth.VerifyMember(id, m.Boot, p) {
		return true
	}
	g.refused.WithLabelValues("gossip_member").Inc()
	now := time.Now().UnixNano()
	if last := g.unprovenLogged.Load(); now-last > logEvery && g.unprovenLogged.CompareAndSwap(last, now) {
		g.log.Warn("gossip member without a valid node proof ignored (not in the ring, not a Raft voter)", "member", id)
	}
	return false
}

// RaftHandshake makes every Raft connection open with this node's proof
// and refuses one without a valid proof (with a gossip key and no TLS;
// with TLS the node certificates do it, and without either, Raft listens
// on loopback only). It also turns on the checks of every inbound Raft
// request (rulesraft/rpccheck.go): a request names the node its
// connection proved, an admitted member at the Raft address gossip gives
// it.
func (g *Guard) RaftHandshake(rc *rulesraft.Config) {
	rc.Members = raftMembers{g}
	rc.RefusedRPC = func() { g.refused.WithLabelValues("raft_rpc").Inc() }
	rc.ServerTLS, rc.ClientTLS = g.RaftTLS()
	if g.tls != nil {
		rc.PeerID = func(cs tls.ConnectionState) (string, bool) {
			id, ok := tlsconf.FromPeerCerts(cs.PeerCertificates)
			return id.Name, ok && id.Role == tlsconf.RoleNode && id.Cluster == g.cfg.ClusterName && id.Name != ""
		}
		return
	}
	if g.auth == nil {
		return
	}
	rc.Hello = func() []byte { return []byte(g.auth.Token(g.cfg.ID)) }
	rc.CheckHello = func(b []byte) (string, bool) {
		id, ok := g.auth.VerifyToken(string(b))
		if !ok {
			g.refused.WithLabelValues("raft").Inc()
		}
		return id, ok && id != ""
	}
}

// raftMembers is rulesraft.Members over this node's gossip view.
type raftMembers struct{ g *Guard }

// RaftAddr is the Raft address of id while it is an admitted member: live
// in gossip and admitted now, or in the current view (which lags one that
// just left by a gossip round).
func (m raftMembers) RaftAddr(id string) (string, bool) {
	if mm, live := m.g.members.Gossiped(id); live && m.g.AdmittedNow(id, mm) {
		return mm.Raft, true
	}
	if mm, ok := m.g.members.Viewed(id); ok {
		return mm.Raft, true
	}
	return "", false
}

// CallerIs refuses a peer call that names another node than the one its
// proof names (Replicate's sender, Handoff's puller): a node speaks for
// itself only. Callers admitted as loopback (no gossip key) name none.
func (g *Guard) CallerIs(ctx context.Context, claimed string) error {
	id, err := g.Caller(ctx)
	if err != nil {
		return err
	}
	return g.SpeaksFor(id, claimed)
}

// Caller is the node id ctx's proof names: the node certificate or proof
// node/authz found (with TLS, only a certificate counts).
func (g *Guard) Caller(ctx context.Context) (string, error) {
	if c := authz.FromContext(ctx); c.Node && (c.HasCert || g.tls == nil) {
		return c.NodeID, nil
	}
	if g.tls != nil {
		return "", status.Error(codes.Unauthenticated, "node: peer call without a node certificate")
	}
	id, ok := g.PeerVerifier()(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "node: peer call without a valid node proof")
	}
	return id, nil
}

// CallerAdmitted refuses a peer call unless the node ctx's proof names is
// a member (identity.Guard.Member): a node credential acts only as the
// member it names, and only while it is one.
func (g *Guard) CallerAdmitted(ctx context.Context) error {
	if g.auth == nil && g.tls == nil {
		return nil
	}
	id, err := g.Caller(ctx)
	if err != nil {
		return err
	}
	return g.ids.Member(ctx, id)
}

// SpeaksFor refuses a caller proven as id that speaks for another node.
func (g *Guard) SpeaksFor(id, claimed string) error {
	if (g.auth != nil || g.tls != nil) && id != claimed {
		return status.Errorf(codes.PermissionDenied, "node: the caller proved it is %q but speaks for %q", id, claimed)
	}
	return nil
}

// Member refuses a node credential naming id unless id is a member
// (identity.Guard.Member).
func (g *Guard) Member(ctx context.Context, id string) error { return g.ids.Member(ctx, id) }

// Ask refuses a hand-off ask for partitions the asker cannot own or hold
// (identity.Guard.Ask).
func (g *Guard) Ask(ctx context.Context, asker string, parts []uint32) error {
	return g.ids.Ask(ctx, asker, parts)
}

// newIdentityGuard binds node credentials to this node's membership
// (node/identity), once New has decided whether callers carry any.
func (g *Guard) newIdentityGuard() *identity.Guard {
	return identity.New(identity.Config{
		On:         g.auth != nil || g.tls != nil,
		Members:    identityMembers{g},
		Refused:    func(kind string) { g.refused.WithLabelValues(kind).Inc() },
		MemberWait: time.Second,             // a member that just joined calls a gossip round before this node hears
		AskWait:    1500 * time.Millisecond, // well under the asker's AskTimeout (3 s)
	})
}

// identityMembers is identity.Membership over this node's view and gossip.
type identityMembers struct{ g *Guard }

// Member: in the current view or live in gossip (the view lags a member
// that just joined). Under TLS, admission binds gossip's entry for id to
// the certificate that names it.
func (m identityMembers) Member(id string) bool {
	if _, ok := m.g.members.Viewed(id); ok {
		return true
	}
	_, live := m.g.members.Gossiped(id)
	return live
}

func (m identityMembers) Ring() *ring.Ring { return m.g.members.Ring() }

// AdmittedRing is the ring of the members gossip reports and admission
// admits now (this node as leaving while it leaves).
func (m identityMembers) AdmittedRing() *ring.Ring {
	g := m.g
	members := map[string]clusterview.Member{}
	for id, mm := range g.members.Live() {
		if g.AdmittedNow(id, mm) {
			members[id] = mm
		}
	}
	if mm, ok := members[g.cfg.ID]; ok && g.members.Leaving() {
		mm.Leaving = true
		members[g.cfg.ID] = mm
	}
	r, err := ring.New(clusterview.RingMembers(members, ""), g.cfg.Ring)
	if err != nil {
		return nil
	}
	return r
}
