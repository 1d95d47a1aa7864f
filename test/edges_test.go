package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/node/authz"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// Issue 25, finding 6: 200 Watch streams with made-up gateway ids on one
// connection made every SDK gateway's fail-open share burst/201. A
// gateway id is bound to its caller (here, with no gateway credential, the
// connection), which holds at most authz.MaxGatewayIDsPerConn ids.
func TestGhostWatchesDoNotShrinkShares(t *testing.T) {
	c := newCluster(t, 1)
	v0 := c.ApplyRules(exactRules)
	n := c.Live()[0]
	cfg := client.DefaultConfig()
	cfg.Cluster, cfg.GatewayID = []string{n.GRPCAddr()}, "real"
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	testwait.For(t, 20*time.Second, "the gateway to hold the rules and be counted", func() error {
		if cl.RulesVersion() < v0 || n.Gateways() != 1 {
			return fmt.Errorf("version %d, node counts %d gateways", cl.RulesVersion(), n.Gateways())
		}
		return nil
	})
	before := cl.Gateways()

	cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	accepted, refused := 0, 0
	for i := 0; i < 200; i++ {
		st, err := weirv1.NewRulesClient(cc).Watch(ctx, &weirv1.WatchRequest{GatewayId: fmt.Sprintf("ghost-%d", i)})
		if err == nil {
			_, err = st.Recv()
		}
		switch status.Code(err) {
		case codes.OK:
			accepted++
		case codes.ResourceExhausted:
			refused++
		default:
			t.Fatalf("ghost %d: %v", i, err)
		}
	}
	if got := int(n.Gateways()); got != 1+accepted || accepted > authz.MaxGatewayIDsPerConn {
		t.Fatalf("node counts %d gateways after %d ghost watches accepted on one connection (at most %d may be)", got, accepted, authz.MaxGatewayIDsPerConn)
	}
	v1 := c.ApplyRules(exactRules + `
  - id: ghosts
    match: {route: /ghosts}
    key: global
    rate: 1
    period: 1h
`)
	testwait.For(t, 20*time.Second, "the gateway to hear the count", func() error {
		if cl.RulesVersion() < v1 || cl.Gateways() != 1+accepted {
			return fmt.Errorf("version %d, %d gateways", cl.RulesVersion(), cl.Gateways())
		}
		return nil
	})
	t.Logf("fail-open share: burst/%d before, burst/%d after 200 ghost watches on one connection (%d accepted, %d refused)",
		before, cl.Gateways(), accepted, refused)
}

// postReport posts body to /v1/gateways/report with content type ct and,
// when set, a bearer token; it answers the status code.
func postReport(t *testing.T, httpAddr, ct, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+httpAddr+"/v1/gateways/report", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Issue 25, finding 4, on a node with no credentials at all: reports are
// JSON only, keys and bodies bounded, a gateway's rate bounded, fake
// fail-open counts cut to what one gateway could decide, and events dated
// 2030 get the node's time.
func TestGatewayReportsBounded(t *testing.T) {
	c := newCluster(t, 1)
	c.ApplyRules(exactRules)
	addr := c.Live()[0].HTTPAddr()
	const js = "application/json"

	if code := postReport(t, addr, "text/plain", "", `{"gateway":"gw","counts":[{"rule":"exact","fail_open":1}]}`); code != http.StatusUnsupportedMediaType {
		t.Fatalf("cross-site text/plain report: %d, want 415", code)
	}
	huge := fmt.Sprintf(`{"gateway":"gw","counts":[],"events":[{"rule":"exact","key":%q,"decision":"denied"}]}`, strings.Repeat("k", 1300000))
	if code := postReport(t, addr, js, "", huge); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("report with a 1.3 MB key: %d, want 413", code)
	}
	long := fmt.Sprintf(`{"gateway":"gw","counts":[],"events":[{"rule":"exact","key":%q,"decision":"denied"}]}`, strings.Repeat("k", 300))
	if code := postReport(t, addr, js, "", long); code != http.StatusBadRequest {
		t.Fatalf("report with a 300-byte key: %d, want 400", code)
	}
	fake := `{"gateway":"gw","counts":[{"rule":"exact","fail_open":1000000000000000}],"events":[{"time":"2030-01-01T00:00:00Z","rule":"exact","key":"k2030","decision":"denied"}]}`
	if code := postReport(t, addr, js, "", fake); code != http.StatusOK {
		t.Fatalf("report: %d", code)
	}
	m := scrape(t, addr)
	if v := metricValue(m, `weir_gateway_decisions_total{decision="allowed",reason="fail_open",rule="exact"}`); v <= 0 || v > 60e6 {
		t.Fatalf("fail-open counted %v from a report of 1e15; want at most 60e6 (1M/s for a minute)", v)
	}
	resp, err := http.Get("http://" + addr + "/v1/events?key=k2030")
	if err != nil {
		t.Fatal(err)
	}
	var evs struct {
		Events []struct {
			Time time.Time `json:"time"`
		} `json:"events"`
	}
	err = json.NewDecoder(resp.Body).Decode(&evs)
	resp.Body.Close()
	if err != nil || len(evs.Events) != 1 || evs.Events[0].Time.Year() == 2030 || time.Since(evs.Events[0].Time) > time.Hour {
		t.Fatalf("event dated 2030: %+v, %v; want one with the node's time", evs.Events, err)
	}
	refused := 0
	for i := 0; i < 20; i++ {
		if code := postReport(t, addr, js, "", `{"gateway":"gw-rate","counts":[]}`); code == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused < 20-5-2 { // a burst of 5, one a second
		t.Fatalf("20 reports at once from one gateway: %d refused", refused)
	}
}

// In token mode with --gateway-token-file, reports and gateway watches
// need the gateway token: the SDK and weir gateway send it (Config.Token).
func TestGatewayToken(t *testing.T) {
	const admin, gw = "admin-secret", "gateway-secret"
	c := wrapCluster(t, testcluster.NewConfigured(t, 1, func(cfg *node.Config) { cfg.AdminToken, cfg.GatewayToken = admin, gw }))
	n := c.Live()[0]
	body := `{"gateway":"gw","counts":[]}`
	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {admin, http.StatusForbidden}, {gw, http.StatusOK}} {
		if code := postReport(t, n.HTTPAddr(), "application/json", tc.token, body); code != tc.want {
			t.Fatalf("report with token %q: %d, want %d", tc.token, code, tc.want)
		}
	}
	newClient := func(id, token string) *client.Client {
		cfg := client.DefaultConfig()
		cfg.Cluster, cfg.GatewayID, cfg.Token = []string{n.GRPCAddr()}, id, token
		cl, err := client.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	newClient("with-token", gw)
	testwait.For(t, 20*time.Second, "the gateway with the token to be counted", func() error {
		if g := n.Gateways(); g != 1 {
			return fmt.Errorf("%d gateways", g)
		}
		return nil
	})
	cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := weirv1.NewRulesClient(cc).Watch(ctx, &weirv1.WatchRequest{GatewayId: "no-token"})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gateway watch without the token: %v, want Unauthenticated", err)
	}
	if _, err := weirv1.NewOpsClient(cc).Report(ctx, &weirv1.GatewayReport{GatewayId: "no-token"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Ops.Report without the token: %v, want Unauthenticated", err)
	}
	if g := n.Gateways(); g != 1 {
		t.Fatalf("%d gateways counted, want 1", g)
	}
}

// Under TLS a gateway is the pair (certificate name, gateway id): replicas
// sharing one certificate count apart, one certificate holds at most
// authz.MaxGatewayIDsPerCredential ids, and an admin certificate is not a
// gateway.
func TestTLSGatewayPairs(t *testing.T) {
	c := testcluster.NewWith(t, 1, testcluster.Options{TLS: true})
	n := c.Live()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watch := func(cc *grpc.ClientConn, id string) error {
		st, err := weirv1.NewRulesClient(cc).Watch(ctx, &weirv1.WatchRequest{GatewayId: id})
		if err == nil {
			_, err = st.Recv()
		}
		return err
	}
	gw := grpcConn(t, n.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleGateway, "g1")))
	for i := 0; i < authz.MaxGatewayIDsPerCredential; i++ {
		// Replicas sharing g1's certificate, each on its own connection
		// for the first two.
		cc := gw
		if i < 2 {
			cc = grpcConn(t, n.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleGateway, "g1")))
		}
		if err := watch(cc, fmt.Sprint("replica-", i)); err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	if err := watch(gw, "one-more"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("gateway id %d on one certificate: %v, want ResourceExhausted", authz.MaxGatewayIDsPerCredential+1, err)
	}
	if g := n.Gateways(); g != authz.MaxGatewayIDsPerCredential {
		t.Fatalf("%d gateways counted, want %d", g, authz.MaxGatewayIDsPerCredential)
	}
	// Another certificate may use the same ids: they are other gateways.
	g2 := grpcConn(t, n.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleGateway, "g2")))
	if err := watch(g2, "replica-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := weirv1.NewOpsClient(g2).Report(ctx, &weirv1.GatewayReport{GatewayId: "replica-0"}); err != nil {
		t.Fatalf("report from a gateway certificate: %v", err)
	}
	adm := grpcConn(t, n.GRPCAddr(), tlsCreds(c.PKI.ClientTLS(tlsconf.RoleAdmin, "alice")))
	if err := watch(adm, "admin-gw"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("gateway watch from an admin certificate: %v, want PermissionDenied", err)
	}
	if _, err := weirv1.NewOpsClient(adm).Report(ctx, &weirv1.GatewayReport{GatewayId: "admin-gw"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("report from an admin certificate: %v, want PermissionDenied", err)
	}
	if g := n.Gateways(); g != authz.MaxGatewayIDsPerCredential+1 {
		t.Fatalf("%d gateways counted, want %d", g, authz.MaxGatewayIDsPerCredential+1)
	}
}
