package test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/internal/testlog"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/node"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

const tlsRules = `rules:
  - id: tls.r
    match: {route: /x, method: GET, plan: "*"}
    key: apikey
    algorithm: token_bucket
    rate: 1
    period: 1h
    burst: 1000
`

// grpcConn dials addr with creds; the test closes it.
func grpcConn(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func tlsCreds(cfg *tls.Config) credentials.TransportCredentials { return credentials.NewTLS(cfg) }

// TestTLSRefusesPlaintextAndForeignCA: on a TLS cluster, plaintext and
// certificates from another CA are refused on the gRPC (public and peer)
// port, the HTTP port and the Raft port; a certificate from the cluster
// CA is served.
func TestTLSRefusesPlaintextAndForeignCA(t *testing.T) {
	logs := &testlog.Buffer{}
	c := testcluster.NewWith(t, 3, testcluster.Options{TLS: true, Config: func(cfg *node.Config) {
		if cfg.ID == "n1" {
			cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	}})
	n := c.Live()[0]
	foreign := testcluster.NewPKI(t, testcluster.Name) // same cluster name, another CA
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// gRPC, public services and Peer.
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":  insecure.NewCredentials(),
		"foreign CA": tlsCreds(foreign.ClientTLS(tlsconf.RoleNode, "n2")),
		// A client that trusts any server, so the node judges its certificate.
		"foreign CA, trusting": tlsCreds(&tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
			GetClientCertificate: foreign.ClientTLS(tlsconf.RoleNode, "n2").GetClientCertificate}),
	} {
		cc := grpcConn(t, n.GRPCAddr(), creds)
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
			t.Errorf("gRPC health, %s: got %v, want Unavailable (refused)", name, err)
		}
		_, err := weirv1.NewPeerClient(cc).Handoff(ctx, &weirv1.HandoffRequest{To: "evil", Partitions: []uint32{1}})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("Peer.Handoff, %s: got %v, want Unavailable (refused)", name, err)
		}
	}
	good := grpcConn(t, n.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleGateway, "g1")))
	if _, err := healthpb.NewHealthClient(good).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("gRPC health with a gateway certificate: %v", err)
	}

	// HTTP.
	if resp, err := http.Get("http://" + n.HTTPAddr() + "/v1/rules"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plaintext HTTP GET /v1/rules answered 200: %s", body)
		}
	}
	if _, err := foreign.HTTPClient(tlsconf.RoleAdmin, "a").Get("https://" + n.HTTPAddr() + "/v1/rules"); err == nil {
		t.Error("HTTPS with a foreign CA's certificate was served")
	}
	// Without a client certificate, only the probes answer.
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 5 * time.Second}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/v1/rules": 401, "/metrics": 401, "/v1/limits/apikey:a": 401, "/v1/cluster": 401} {
		resp, err := noCert.Get("https://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatalf("HTTPS %s without a client certificate: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("HTTPS %s without a client certificate: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := c.PKI.HTTPClient(tlsconf.RoleGateway, "g1").Get("https://" + n.HTTPAddr() + "/v1/rules")
	if err != nil {
		t.Fatalf("HTTPS with a gateway certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTPS GET /v1/rules with a gateway certificate: %d", resp.StatusCode)
	}

	// Raft: a plaintext Raft RPC gets no answer; TLS with a foreign CA,
	// or a gateway certificate from the cluster CA, fails the handshake.
	raw, err := net.DialTimeout("tcp", n.RaftAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = raw.Write([]byte{0, 0x81, 0xa4}) // rpcAppendEntries, a msgpack map: Raft would answer it
	_ = raw.SetReadDeadline(time.Now().Add(7 * time.Second))
	if k, err := raw.Read(make([]byte, 64)); err == nil || k > 0 {
		t.Errorf("plaintext Raft connection answered %d bytes (err %v)", k, err)
	}
	raw.Close()
	for name, cfg := range map[string]*tls.Config{
		"foreign CA":   foreign.ClientTLS(tlsconf.RoleNode, "n2"),
		"gateway cert": c.PKI.ClientTLS(tlsconf.RoleGateway, "g1"),
	} {
		d := tls.Dialer{Config: cfg}
		conn, err := d.DialContext(ctx, "tcp", n.RaftAddr())
		if err == nil {
			// TLS 1.3: the server's verdict on the client certificate
			// arrives with the first read.
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			t.Errorf("Raft over TLS with a %s: got %v, want the handshake refused", name, err)
		}
	}
	// A node certificate from the cluster CA completes the handshake.
	d := tls.Dialer{Config: c.PKI.ClientTLS(tlsconf.RoleNode, "n9")}
	conn, err := d.DialContext(ctx, "tcp", n.RaftAddr())
	if err != nil {
		t.Fatalf("Raft over TLS with a node certificate: %v", err)
	}
	conn.Close()

	// Every refusal was logged, with its reason.
	testwait.For(t, 10*time.Second, "the refusals in n1's log", func() error {
		out := logs.String()
		for _, want := range []string{
			`msg="tls: refused a connection" node=n1 component=grpc`, // plaintext and foreign CA on gRPC
			`msg="http: http: TLS handshake error`,                   // plaintext or foreign CA on HTTP
			`msg="raft: refused a connection: TLS handshake failed"`,
			`is not signed by this cluster's CA`,
			`role gateway may not connect here`, // the gateway certificate on Raft
		} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("no %q in the log", want)
			}
		}
		return nil
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestTLSRoles: a gateway certificate calls Limiter and reads rules, but
// cannot call Peer (Handoff, Replicate, Forward), write rules, or refund;
// an admin certificate or the admin token writes; a node certificate
// refunds.
func TestTLSRoles(t *testing.T) {
	const token = "s3cret"
	c := testcluster.NewWith(t, 3, testcluster.Options{TLS: true, Config: func(cfg *node.Config) { cfg.AdminToken = token }})
	c.ApplyRules(tlsRules)
	n := c.Live()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gw := grpcConn(t, n.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleGateway, "g1")))
	nodeCC := grpcConn(t, n.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleNode, "n2")))

	peer := weirv1.NewPeerClient(gw)
	before := n.Members()
	if _, err := peer.Handoff(ctx, &weirv1.HandoffRequest{To: "evil", Partitions: []uint32{0, 1, 2}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Peer.Handoff from a gateway: %v, want PermissionDenied", err)
	}
	if _, err := peer.Replicate(ctx, &weirv1.ReplicateRequest{From: "evil", States: []*weirv1.CounterState{{Id: 1, Partition: 1}}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Peer.Replicate from a gateway: %v, want PermissionDenied", err)
	}
	if _, err := peer.Forward(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "apikey:a", Rule: "tls.r", Cost: 1}}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Peer.Forward from a gateway: %v, want PermissionDenied", err)
	}
	st, err := peer.ForwardStream(ctx)
	if err == nil {
		_ = st.Send(&weirv1.CheckStreamRequest{Id: 1, Items: []*weirv1.CheckItem{{Key: "apikey:a", Rule: "tls.r", Cost: 1}}})
		_, err = st.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Peer.ForwardStream from a gateway: %v, want PermissionDenied", err)
	}
	if after := n.Members(); after.RingVersion != before.RingVersion {
		t.Errorf("ring changed after refused Peer calls: %d → %d", before.RingVersion, after.RingVersion)
	}

	// Limiter: checks yes, refunds no (unary and stream); a node may refund.
	lim := weirv1.NewLimiterClient(gw)
	resp, err := lim.Check(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "apikey:a", Rule: "tls.r", Cost: 5}}})
	if err != nil || resp.Results[0].GetError() != "" || !resp.Results[0].Allowed {
		t.Fatalf("Limiter.Check from a gateway: %v %v", resp, err)
	}
	remaining := resp.Results[0].Remaining
	refund := &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "apikey:a", Rule: "tls.r", Cost: 5, Refund: true}}}
	if _, err := lim.Check(ctx, refund); status.Code(err) != codes.PermissionDenied {
		t.Errorf("refund from a gateway: %v, want PermissionDenied", err)
	}
	cs, err := lim.CheckStream(ctx)
	if err == nil {
		_ = cs.Send(&weirv1.CheckStreamRequest{Id: 1, Items: refund.Items})
		_, err = cs.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("refund on CheckStream from a gateway: %v, want PermissionDenied", err)
	}
	resp, err = lim.Check(ctx, &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: "apikey:a", Rule: "tls.r", Cost: 0}}})
	if err != nil || resp.Results[0].Remaining != remaining {
		t.Errorf("after refused refunds remaining = %v (err %v), want %d (unchanged)", resp.GetResults(), err, remaining)
	}
	if resp, err := weirv1.NewLimiterClient(nodeCC).Check(ctx, refund); err != nil || resp.Results[0].GetError() != "" {
		t.Errorf("refund from a node: %v %v", resp, err)
	}

	// Rules: a gateway reads and watches, but cannot write.
	rules := weirv1.NewRulesClient(gw)
	if _, err := rules.ListRules(ctx, &weirv1.ListRulesRequest{}); err != nil {
		t.Errorf("ListRules from a gateway: %v", err)
	}
	w, err := rules.Watch(ctx, &weirv1.WatchRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if err != nil {
		t.Errorf("Watch from a gateway: %v", err)
	}
	del := &weirv1.DeleteRuleRequest{Id: "tls.r"}
	if _, err := rules.DeleteRule(ctx, del); status.Code(err) != codes.PermissionDenied {
		t.Errorf("DeleteRule from a gateway: %v, want PermissionDenied", err)
	}
	gwHTTP := c.PKI.HTTPClient(tlsconf.RoleGateway, "g1")
	url := "https://" + n.HTTPAddr() + "/v1/overrides"
	body := `{"key":"apikey:a","rule":"tls.r","rate":1,"burst":1}`
	put := func(hc *http.Client, hdr string) int {
		req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put(gwHTTP, ""); code != http.StatusForbidden {
		t.Errorf("PUT /v1/overrides with a gateway certificate: %d, want 403", code)
	}
	if got := n.Store().Current().Overrides; len(got) != 0 {
		t.Fatalf("a refused write changed the overrides: %v", got)
	}
	if code := put(gwHTTP, "Bearer "+token); code != http.StatusOK {
		t.Errorf("PUT /v1/overrides with a gateway certificate and the admin token: %d, want 200", code)
	}
	if code := put(c.PKI.HTTPClient(tlsconf.RoleAdmin, "alice"), ""); code != http.StatusOK {
		t.Errorf("PUT /v1/overrides with an admin certificate: %d, want 200", code)
	}
	tokenCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	if _, err := rules.DeleteOverride(tokenCtx, &weirv1.DeleteOverrideRequest{Key: "apikey:a", Rule: "tls.r"}); err != nil {
		t.Errorf("DeleteOverride with a gateway certificate and the admin token: %v", err)
	}
	// An admin certificate writes over gRPC too, on a follower (which
	// forwards the write to the leader with its node certificate).
	for _, nd := range c.Live() {
		if nd.Store().IsLeader() {
			continue
		}
		adm := grpcConn(t, nd.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleAdmin, "alice")))
		if _, err := weirv1.NewRulesClient(adm).DeleteRule(ctx, del); err != nil {
			t.Errorf("DeleteRule from an admin certificate on follower %s: %v", nd.ID(), err)
		}
		break
	}
}

// TestTokenOnlyReadsNeedARole: without TLS, a node started with an admin
// token answers reads of rules, overrides and history only to the token.
func TestTokenOnlyReadsNeedARole(t *testing.T) {
	const token = "s3cret"
	c := testcluster.NewWith(t, 1, testcluster.Options{Config: func(cfg *node.Config) { cfg.AdminToken = token }})
	n := c.Live()[0]
	for _, path := range []string{"/v1/rules", "/v1/overrides", "/v1/rules/history", "/v1/rules/x"} {
		get := func(hdr string) int {
			req, _ := http.NewRequest(http.MethodGet, "http://"+n.HTTPAddr()+path, nil)
			if hdr != "" {
				req.Header.Set("Authorization", hdr)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := get(""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, code)
		}
		if code := get("Bearer wrong"); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, code)
		}
		if code := get("Bearer " + token); code == http.StatusUnauthorized || code == http.StatusForbidden {
			t.Errorf("GET %s with the token: %d", path, code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rules := weirv1.NewRulesClient(grpcConn(t, n.GRPCAddr(), insecure.NewCredentials()))
	if _, err := rules.ListRules(ctx, &weirv1.ListRulesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ListRules without the token: %v, want Unauthenticated", err)
	}
	if _, err := rules.History(ctx, &weirv1.HistoryRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("History without the token: %v, want Unauthenticated", err)
	}
	tctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	if _, err := rules.ListRules(tctx, &weirv1.ListRulesRequest{}); err != nil {
		t.Errorf("ListRules with the token: %v", err)
	}
}

// impostor is a gossip member that claims the id "evil" and whose gRPC
// address presents another node's (stolen) certificate.
type impostor struct {
	ml *memberlist.Memberlist
}

type impostorMeta []byte

func (m impostorMeta) NodeMeta(int) []byte           { return m }
func (impostorMeta) NotifyMsg([]byte)                {}
func (impostorMeta) GetBroadcasts(int, int) [][]byte { return nil }
func (impostorMeta) LocalState(bool) []byte          { return nil }
func (impostorMeta) MergeRemoteState([]byte, bool)   {}

func startImpostor(t *testing.T, id string, stolen tlsconf.Files, cluster, join string) *impostor {
	t.Helper()
	src, err := tlsconf.New(stolen, cluster, nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", src.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go func() { _ = conn.(*tls.Conn).Handshake(); _, _ = io.Copy(io.Discard, conn); conn.Close() }()
		}
	}()
	raftLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raftLis.Close() })
	meta, _ := json.Marshal(map[string]any{"g": lis.Addr().String(), "h": lis.Addr().String(), "r": raftLis.Addr().String(), "b": 7})
	mc := memberlist.DefaultLANConfig()
	mc.Name = id
	mc.BindAddr = "127.0.0.1"
	mc.BindPort = 0
	mc.Delegate = impostorMeta(meta)
	mc.Label = cluster // it knows the cluster's name: the gossip label lets it in, the certificate check must not
	mc.Logger = nil
	mc.LogOutput = io.Discard
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ml.Shutdown() })
	if _, err := ml.Join([]string{join}); err != nil {
		t.Fatal(err)
	}
	return &impostor{ml: ml}
}

// TestTLSNodeCertForAnotherIDCannotJoin: a gossip member named "evil"
// whose gRPC port presents n2's certificate stays out of every node's
// ring and out of the Raft configuration, and every counter stays.
func TestTLSNodeCertForAnotherIDCannotJoin(t *testing.T) {
	c := testcluster.NewWith(t, 3, testcluster.Options{TLS: true})
	c.ApplyRules(tlsRules)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw := weirv1.NewLimiterClient(grpcConn(t, c.Live()[0].GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleGateway, "g1"))))
	keys := make([]*weirv1.CheckItem, 30)
	for i := range keys {
		keys[i] = &weirv1.CheckItem{Key: fmt.Sprintf("apikey:k%d", i), Rule: "tls.r", Cost: 10}
	}
	resp, err := gw.Check(ctx, &weirv1.CheckRequest{Items: keys})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, len(keys))
	for i, r := range resp.Results {
		want[i] = r.Remaining
	}
	ringBefore := c.Live()[0].Members().RingVersion

	stolen := c.PKI.Files(tlsconf.RoleNode, "n2", time.Hour)
	imp := startImpostor(t, "evil", stolen, c.PKI.Cluster, c.Live()[0].GossipAddr())
	testwait.For(t, 10*time.Second, "the impostor to see the cluster by gossip", func() error {
		if k := imp.ml.NumMembers(); k != 4 {
			return fmt.Errorf("%d members", k)
		}
		return nil
	})
	// Give the nodes time to verify (admitTimeout 2 s) and rebuild.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range c.Live() {
			for _, m := range n.Members().Members {
				if m.ID == "evil" {
					t.Fatalf("%s lists the impostor as a member: %+v", n.ID(), m)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range c.Live() {
		cfg, err := n.Store().Configuration()
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg) != 3 {
			t.Errorf("%s: Raft configuration %v, want the 3 nodes", n.ID(), cfg)
		}
		for _, s := range cfg {
			if s.ID == "evil" {
				t.Errorf("%s: the impostor is in the Raft configuration", n.ID())
			}
		}
	}
	if v := c.Live()[0].Members().RingVersion; v != ringBefore {
		t.Errorf("ring version changed %d → %d", ringBefore, v)
	}
	for i := range keys {
		keys[i].Cost = 0
	}
	resp, err = gw.Check(ctx, &weirv1.CheckRequest{Items: keys})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.Results {
		if r.GetError() != "" || r.Remaining != want[i] {
			t.Errorf("%s: remaining %d (err %q), want %d", keys[i].Key, r.Remaining, r.GetError(), want[i])
		}
	}
}
