package security

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/node/clusterview"
)

// admission is which members proved, with TLS, that they are the node
// gossip says they are: the member's gRPC port answered a TLS handshake
// with a node certificate from the cluster CA naming the member's id.
// Only admitted members enter this node's view (the ring, forwarding,
// replication, Raft voters). Verification runs on goroutines of the node
// (Config.Go); admission.mu guards the maps.
type admission struct {
	mu      sync.Mutex
	ok      map[string]string    // id → gRPC address verified
	pending map[string]bool      // id → verification running
	retry   map[string]time.Time // id → earliest next attempt after a failure
}

func newAdmission() *admission {
	return &admission{ok: map[string]string{}, pending: map[string]bool{}, retry: map[string]time.Time{}}
}

// Verification timing.
const (
	admitTimeout = 2 * time.Second
	admitRetry   = 5 * time.Second
)

// Admitted filters members to the admitted ones (all of them without
// TLS), starting a verification for each other one. wait is true while a
// member seen for the first time is being verified: the caller keeps its
// current view meanwhile rather than build a ring without it.
func (g *Guard) Admitted(members map[string]clusterview.Member) (out map[string]clusterview.Member, wait bool) {
	if g.tls == nil {
		return members, false
	}
	a := g.admit
	a.mu.Lock()
	defer a.mu.Unlock()
	out = make(map[string]clusterview.Member, len(members))
	now := time.Now()
	for id, m := range members {
		if id == g.cfg.ID || (m.GRPC != "" && a.ok[id] == m.GRPC) {
			out[id] = m
			continue
		}
		if a.pending[id] {
			_, failedBefore := a.retry[id]
			wait = wait || !failedBefore
			continue
		}
		if m.GRPC == "" || now.Before(a.retry[id]) {
			continue
		}
		_, failedBefore := a.retry[id]
		wait = wait || !failedBefore
		a.pending[id] = true
		g.cfg.Go(func() { g.verifyMember(id, m.GRPC) })
	}
	// Verified members are kept when they leave gossip (a member back
	// at the same address is admitted at once); failures are forgotten.
	for id := range a.retry {
		if _, ok := members[id]; !ok && !a.pending[id] {
			delete(a.retry, id)
		}
	}
	return out, wait
}

// AdmittedNow reports whether the live member m (id) is admitted: always
// without TLS (gossip proofs were checked as it joined), else when its
// gRPC address was verified.
func (g *Guard) AdmittedNow(id string, m clusterview.Member) bool {
	if g.tls == nil || id == g.cfg.ID {
		return true
	}
	g.admit.mu.Lock()
	defer g.admit.mu.Unlock()
	return m.GRPC != "" && g.admit.ok[id] == m.GRPC
}

// verifyMember handshakes with the member's gRPC port and checks that its
// certificate names node/<id>.
func (g *Guard) verifyMember(id, addr string) {
	err := g.checkMember(id, addr)
	a := g.admit
	a.mu.Lock()
	delete(a.pending, id)
	if err == nil {
		a.ok[id] = addr
		delete(a.retry, id)
	} else {
		a.retry[id] = time.Now().Add(admitRetry)
	}
	a.mu.Unlock()
	if err != nil {
		if g.cfg.Ctx.Err() == nil {
			g.log.Warn("refused a member: it did not prove it is that node", "member", id, "grpc", addr, "err", err)
		}
	} else {
		g.log.Info("admitted a member", "member", id, "grpc", addr)
	}
	g.members.Changed()
}

func (g *Guard) checkMember(id, addr string) error {
	ctx, cancel := context.WithTimeout(g.cfg.Ctx, admitTimeout)
	defer cancel()
	var (
		raw net.Conn
		err error
	)
	if g.cfg.PeerDialer != nil {
		raw, err = g.cfg.PeerDialer(ctx, addr)
	} else {
		var d net.Dialer
		raw, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer raw.Close()
	cfg := g.tls.ClientConfig(tlsconf.RoleNode)
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	got, ok := tlsconf.FromPeerCerts(tc.ConnectionState().PeerCertificates)
	want := tlsconf.Identity{Cluster: g.cfg.ClusterName, Role: tlsconf.RoleNode, Name: id}
	if !ok || got != want {
		return fmt.Errorf("its certificate names %s, not %s", got, want)
	}
	return nil
}
