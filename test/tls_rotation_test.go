package test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/internal/tlsconf"
)

const rotationRules = `rules:
  - id: rot.r
    match: {route: /x, method: GET, plan: "*"}
    key: apikey
    algorithm: token_bucket
    rate: 1000
    period: 1s
    burst: 10000000
    fail_mode: closed
    timeout: 2s
`

// servedSerial is the serial of the certificate addr presents to a new
// TLS connection.
func servedSerial(cfg *tls.Config, addr string) (*big.Int, error) {
	d := tls.Dialer{Config: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func fileSerial(t *testing.T, path string) *big.Int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

// TestTLSCertificateRotation rotates every node's certificate, then the CA
// (old and new trusted together, then every certificate from the new
// one), while a gateway checks without pause: no check is lost, each node
// serves its new certificate to new connections without a restart, an
// expired certificate put in place is refused (the node keeps the current
// one), and a client with an expired certificate is refused.
func TestTLSCertificateRotation(t *testing.T) {
	c := testcluster.NewWith(t, 3, testcluster.Options{TLS: true})
	c.ApplyRules(rotationRules)
	gwSrc := c.PKI.Source(tlsconf.RoleGateway, "g1")
	cfg := client.DefaultConfig()
	cfg.Cluster, cfg.GatewayID, cfg.TLS = c.GRPCAddrs(), "g1", gwSrc.ClientConfig()
	gw, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := gw.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	// Checks run throughout, bounded in count and time.
	stop := make(chan struct{})
	var (
		wg            sync.WaitGroup
		done, refused int
		firstErr      error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 200000 && ctx.Err() == nil; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d, err := gw.CheckKey(ctx, fmt.Sprintf("apikey:k%d", i%64), 1, "rot.r")
			done++
			if err != nil || !d.Allowed {
				refused++
				if firstErr == nil {
					firstErr = fmt.Errorf("check %d: allowed=%v status=%d err=%v", i, d.Allowed, d.Status, err)
				}
			}
		}
	}()

	probe := c.PKI.ClientTLS(tlsconf.RoleGateway, "probe")
	waitServed := func(what string) {
		t.Helper()
		for _, n := range c.Live() {
			want := fileSerial(t, c.PKI.Files(tlsconf.RoleNode, n.ID(), time.Hour).Cert)
			testwait.For(t, 10*time.Second, n.ID()+" to serve its "+what+" certificate", func() error {
				got, err := servedSerial(probe, n.GRPCAddr())
				if err != nil {
					return err
				}
				if got.Cmp(want) != 0 {
					return fmt.Errorf("serves serial %v, want %v", got, want)
				}
				return nil
			})
		}
	}
	waitServed("renewed")

	// The CA: trust old and new, move every certificate to the new one.
	c.PKI.RotateCA()
	waitServed("new CA's")
	probe = c.PKI.ClientTLS(tlsconf.RoleGateway, "probe") // from the new CA
	if _, err := servedSerial(probe, c.Live()[0].GRPCAddr()); err != nil {
		t.Fatalf("a gateway certificate from the new CA: %v", err)
	}
	c.PKI.Files(tlsconf.RoleGateway, "g1", time.Hour) // the running gateway's, reloaded by gwSrc
	// Rules still commit through Raft (an admin certificate from the new CA).
	c.ApplyRules(rotationRules + "    shadow: false\n")

	// An expired certificate put in place is refused; the node keeps the
	// one it has.
	n1 := c.Live()[0]
	keep, err := servedSerial(probe, n1.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	c.PKI.Files(tlsconf.RoleNode, n1.ID(), -time.Minute)
	time.Sleep(tlsconf.ReloadEvery + 100*time.Millisecond) // the next look at the files
	for range 3 {
		got, err := servedSerial(probe, n1.GRPCAddr())
		if err != nil || got.Cmp(keep) != 0 {
			t.Fatalf("after an expired certificate was written: serial %v (err %v), want the kept %v", got, err, keep)
		}
	}

	// A client presenting an expired certificate is refused.
	id := tlsconf.Identity{Cluster: c.PKI.Cluster, Role: tlsconf.RoleGateway, Name: "old"}
	cp, kp, err := c.PKI.CA.Issue(id, nil, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	expired, err := tls.X509KeyPair(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	cc := grpcConn(t, n1.GRPCAddr(), tlsCreds(&tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: []tls.Certificate{expired}}))
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("a client with an expired certificate: %v, want Unavailable (refused)", err)
	}

	close(stop)
	wg.Wait()
	if done < 100 {
		t.Fatalf("only %d checks ran during the rotation", done)
	}
	if refused > 0 {
		t.Fatalf("%d of %d checks lost during the rotation; first: %v", refused, done, firstErr)
	}
	if st := gw.Stats(); st.RPCErrors > 0 || st.Fallbacks > 0 {
		t.Fatalf("gateway saw %d RPC errors and %d fail-mode decisions", st.RPCErrors, st.Fallbacks)
	}
	t.Logf("%d checks during the rotation, none lost", done)
}

// TestTLSLeaseRefundRefusedQuietly: under TLS a gateway may not refund, so
// the SDK's first refused lease refund stops it sending more, and the
// refusal is not counted as a sick node (with BreakerFailures 1, one
// counted failure would open the breaker and send checks to the fail
// mode).
func TestTLSLeaseRefundRefusedQuietly(t *testing.T) {
	c := testcluster.NewWith(t, 3, testcluster.Options{TLS: true})
	c.ApplyRules(`rules:
  - id: lease.r
    match: {route: /x, method: GET, plan: "*"}
    key: apikey
    algorithm: token_bucket
    rate: 1000
    period: 1s
    burst: 1000000
    fail_mode: closed
    timeout: 2s
    lease: 50
`)
	cfg := client.DefaultConfig()
	cfg.Cluster, cfg.GatewayID = c.GRPCAddrs(), "g1"
	cfg.TLS = c.PKI.ClientTLS(tlsconf.RoleGateway, "g1")
	cfg.LeaseTTL = 100 * time.Millisecond
	cfg.BreakerFailures = 1
	gw, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := gw.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(n int) {
		t.Helper()
		for i := range n {
			d, err := gw.CheckKey(ctx, "apikey:hot", 1, "lease.r")
			if err != nil || !d.Allowed {
				t.Fatalf("check %d: allowed=%v status=%d err=%v", i, d.Allowed, d.Status, err)
			}
		}
	}
	check(200)
	if gw.Stats().LeaseHits == 0 {
		t.Fatal("no lease was taken; the test checks nothing")
	}
	// Let the leases expire and the janitor try to give them back, twice.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		check(10)
		time.Sleep(50 * time.Millisecond)
	}
	st := gw.Stats()
	if st.BreakerOpens != 0 || st.Fallbacks != 0 || st.LeaseRefunds != 0 {
		t.Fatalf("breaker opens %d, fail-mode decisions %d, refunds accepted %d; want 0, 0, 0", st.BreakerOpens, st.Fallbacks, st.LeaseRefunds)
	}
}
