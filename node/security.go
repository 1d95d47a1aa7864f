package node

import (
	"context"
	"crypto/tls"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/node/authz"
)

// setupSecurity loads the TLS files (Config.TLS), checks that the
// certificate names this node, and builds the authorizer. Called by New
// before anything listens or dials.
func (n *Node) setupSecurity() error {
	if n.cfg.TLS.Set() {
		src, err := tlsconf.New(n.cfg.TLS, n.cfg.ClusterName, n.log.With("component", "tls"))
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		want := tlsconf.Identity{Cluster: n.cfg.ClusterName, Role: tlsconf.RoleNode, Name: n.cfg.ID}
		if id := src.Identity(); id != want {
			return fmt.Errorf("%w: certificate %s names %s; a node's certificate must name %s", ErrConfig, n.cfg.TLS.Cert, id, want)
		}
		src.Pin()
		n.tls = src
	}
	proof := n.cfg.NodeProof
	if proof == nil && n.tls == nil && n.auth != nil {
		proof = n.auth.Verify // a gossip key's node proof (keys.go)
	}
	n.authz = authz.New(authz.Config{
		TLS:          n.tls != nil,
		AdminToken:   n.cfg.AdminToken,
		GatewayToken: n.cfg.GatewayToken,
		ReadToken:    n.cfg.ReadToken,
		ReadProof:    n.peerReads().Check,
		NodeProof:    proof,
		Logger:       n.log.With("component", "authz"),
	})
	n.admit = newAdmission()
	return nil
}

// secured reports whether any of TLS, a token, a gossip key or a node
// proof is on.
func (n *Node) secured() bool {
	return n.tls != nil || n.cfg.AdminToken != "" || n.cfg.NodeProof != nil || n.auth != nil || n.cfg.GatewayToken != "" || n.cfg.ReadToken != ""
}

// grpcServerOptions are the gRPC server's credentials and authorization
// interceptors (none when nothing is configured: today's open node).
func (n *Node) grpcServerOptions() []grpc.ServerOption {
	// A connection without a call for IdleTimeout is closed (GOAWAY).
	opts := []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: n.cfg.idleTimeout()})}
	if n.secured() {
		opts = append(opts, grpc.ChainUnaryInterceptor(n.authz.UnaryInterceptor()), grpc.ChainStreamInterceptor(n.authz.StreamInterceptor()))
	}
	if n.tls != nil {
		opts = append(opts, grpc.Creds(tlsconf.ServerCredentials(n.tls.ServerConfig(), n.log.With("component", "grpc"))))
	}
	return opts
}

// peerCreds are the credentials of this node's connections to other
// nodes: TLS presenting its node certificate and accepting only node
// certificates, or plaintext.
func (n *Node) peerCreds() grpc.DialOption {
	if n.tls == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(n.tls.ClientConfig(tlsconf.RoleNode)))
}

// raftTLS is the Raft transport's TLS (nil, nil without TLS): only nodes
// on either side.
func (n *Node) raftTLS() (server, client *tls.Config) {
	if n.tls == nil {
		return nil, nil
	}
	return n.tls.ServerConfig(tlsconf.RoleNode), n.tls.ClientConfig(tlsconf.RoleNode)
}

// secureHTTP wraps the API in the authorization middleware and, with TLS,
// makes the server HTTPS with client certificates required.
func (n *Node) secureHTTP(srv *http.Server) {
	if n.secured() {
		srv.Handler = n.authz.Middleware(srv.Handler)
	}
	if n.tls != nil {
		// Callers without a certificate reach /healthz and /readyz only
		// (node/authz).
		srv.TLSConfig = n.tls.ServerConfigOptionalClient()
		srv.ErrorLog = stdlog.New(tlsconf.ErrorLog(n.log.With("component", "http")), "", 0)
	}
}

// serveHTTP serves the HTTP API on its listener, over TLS when configured.
func (n *Node) serveHTTP() error {
	if n.tls != nil {
		return n.httpSrv.ServeTLS(n.httpLis, "", "")
	}
	return n.httpSrv.Serve(n.httpLis)
}

// admission is which members proved, with TLS, that they are the node
// gossip says they are: the member's gRPC port answered a TLS handshake
// with a node certificate from the cluster CA naming the member's id.
// Only admitted members enter this node's view (the ring, forwarding,
// replication, Raft voters). Verification runs on goroutines of the node
// (goFunc); admission.mu guards the maps.
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

// admitted filters members to the admitted ones (all of them without
// TLS), starting a verification for each other one. wait is true while a
// member seen for the first time is being verified: the caller keeps its
// current view meanwhile rather than build a ring without it.
func (n *Node) admitted(members map[string]member) (out map[string]member, wait bool) {
	if n.tls == nil {
		return members, false
	}
	a := n.admit
	a.mu.Lock()
	defer a.mu.Unlock()
	out = make(map[string]member, len(members))
	now := time.Now()
	for id, m := range members {
		if id == n.cfg.ID || (m.GRPC != "" && a.ok[id] == m.GRPC) {
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
		n.goFunc(func() { n.verifyMember(id, m.GRPC) })
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

// admittedNow reports whether the live member m (id) is admitted: always
// without TLS (gossip proofs were checked as it joined), else when its
// gRPC address was verified.
func (n *Node) admittedNow(id string, m member) bool {
	if n.tls == nil || id == n.cfg.ID {
		return true
	}
	n.admit.mu.Lock()
	defer n.admit.mu.Unlock()
	return m.GRPC != "" && n.admit.ok[id] == m.GRPC
}

// verifyMember handshakes with the member's gRPC port and checks that its
// certificate names node/<id>.
func (n *Node) verifyMember(id, addr string) {
	err := n.checkMember(id, addr)
	a := n.admit
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
		if n.ctx.Err() == nil {
			n.log.Warn("refused a member: it did not prove it is that node", "member", id, "grpc", addr, "err", err)
		}
	} else {
		n.log.Info("admitted a member", "member", id, "grpc", addr)
	}
	n.cluster.Refresh()
}

func (n *Node) checkMember(id, addr string) error {
	ctx, cancel := context.WithTimeout(n.ctx, admitTimeout)
	defer cancel()
	var (
		raw net.Conn
		err error
	)
	if n.cfg.PeerDialer != nil {
		raw, err = n.cfg.PeerDialer(ctx, addr)
	} else {
		var d net.Dialer
		raw, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer raw.Close()
	cfg := n.tls.ClientConfig(tlsconf.RoleNode)
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	got, ok := tlsconf.FromPeerCerts(tc.ConnectionState().PeerCertificates)
	want := tlsconf.Identity{Cluster: n.cfg.ClusterName, Role: tlsconf.RoleNode, Name: id}
	if !ok || got != want {
		return fmt.Errorf("its certificate names %s, not %s", got, want)
	}
	return nil
}
