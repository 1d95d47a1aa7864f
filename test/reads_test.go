package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weirlimit/weir/internal/peerauth"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/internal/tlsconf"
	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/node/events"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// Tests of the operators' reads (events, hot keys, the ops snapshot):
// bounded under hostile input, fanned out with node credentials, guarded
// by the read role, and idle connections closed.

// readsRules: every denial is an event; burst 1, so a key's second check
// is denied.
const readsRules = `rules:
  - id: reads.r
    match: {route: /x, method: GET, plan: "*"}
    key: apikey
    algorithm: token_bucket
    rate: 1
    period: 1h
    burst: 1
    events: {sample: 1}
`

// denyOnce checks key twice through base (http://… or https://…) so the
// second is denied: one event on that node.
func denyOnce(t *testing.T, hc *http.Client, base, key, hdr string) {
	t.Helper()
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/limits/check", strings.NewReader(`{"key":"`+key+`","rule":"reads.r"}`))
		req.Header.Set("Content-Type", "application/json")
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("check %s: %s", key, resp.Status)
		}
	}
}

// getJSON GETs url with hdr as Authorization (if set) and decodes a 200
// answer into v; it returns the status.
func getJSON(t *testing.T, hc *http.Client, url, hdr string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if hdr != "" {
		req.Header.Set("Authorization", hdr)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v (%.200s)", url, err, b)
		}
	}
	return resp.StatusCode
}

// clusterRead is the shape common to the cluster-wide reads.
type clusterRead struct {
	Events   []events.Event `json:"events"`
	Answered []string       `json:"answered"`
	Failed   []string       `json:"failed"`
}

func (r clusterRead) nodes() []string {
	var out []string
	for _, e := range r.Events {
		if !slices.Contains(out, e.Node) {
			out = append(out, e.Node)
		}
	}
	slices.Sort(out)
	return out
}

// follower reads GET url (server-sent events) until ctx ends, noting the
// nodes its events came from.
type follower struct {
	mu    sync.Mutex
	nodes map[string]bool
	code  int
}

func follow(ctx context.Context, t *testing.T, hc *http.Client, url, hdr string, wg *sync.WaitGroup) *follower {
	t.Helper()
	f := &follower{nodes: map[string]bool{}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if hdr != "" {
		req.Header.Set("Authorization", hdr)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	f.code = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return f
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e events.Event
			if json.Unmarshal([]byte(data), &e) == nil {
				f.mu.Lock()
				f.nodes[e.Node] = true
				f.mu.Unlock()
			}
		}
	}()
	return f
}

func (f *follower) saw(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[id]
}

// TestEventsHugeKeysAndFollowersStayBounded is finding 4 of issue 25:
// reports with 1 MB keys, then many cluster followers. Before, a
// member's answer was cut at 16 MiB, failed to decode, its cursor never
// moved and every follower asked for the whole buffer again each second
// (a node went from 35 MB to 9.2 GB). Now keys are bounded in the buffer,
// the feed pages in bounded answers and is shared: the heap stays within
// 64 MiB of where it was, and the followers still see the other member's
// events.
func TestEventsHugeKeysAndFollowersStayBounded(t *testing.T) {
	const (
		followers = 20
		bound     = 64 << 20
	)
	c := testcluster.New(t, 2)
	c.ApplyRules(readsRules)
	a, b := c.Live()[0], c.Live()[1]
	huge := strings.Repeat("x", 1<<20)
	for i := range 6 { // 18 MB of keys on b, each report under 4 MiB
		var evs []string
		for j := range 3 {
			evs = append(evs, fmt.Sprintf(`{"rule":"reads.r","key":"%s%d-%d","decision":"denied"}`, huge, i, j))
		}
		postAny(t, "http://"+b.HTTPAddr()+"/v1/gateways/report", `{"gateway":"g1","events":[`+strings.Join(evs, ",")+`]}`)
	}
	denyOnce(t, http.DefaultClient, "http://"+b.HTTPAddr(), "apikey:small", "")

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	sampleCtx, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var fs []*follower
	for range followers {
		f := follow(ctx, t, http.DefaultClient, "http://"+a.HTTPAddr()+"/v1/events?follow=true", "", &wg)
		if f.code != http.StatusOK {
			t.Fatalf("follower: %d", f.code)
		}
		fs = append(fs, f)
	}
	start := time.Now()
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		err = nil
		for i, f := range fs {
			if !f.saw(b.ID()) {
				err = fmt.Errorf("follower %d has seen no event of %s", i, b.ID())
			}
		}
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	// At least five of the feed's polls (one a second) with every
	// follower connected.
	if d := 5*time.Second - time.Since(start); d > 0 {
		<-time.After(d)
	}
	stopSampling()
	<-sampled
	grew := int64(peak.Load()) - int64(base)
	t.Logf("heap %d MiB before %d followers, peak %d MiB (+%d MiB; bound +%d MiB)", base>>20, followers, peak.Load()>>20, grew>>20, bound>>20)
	if err != nil {
		t.Error(err)
	}
	if grew > bound {
		t.Errorf("the heap grew by %d MiB with %d followers, want at most %d MiB", grew>>20, followers, bound>>20)
	}
}

// TestEventsFollowersBounded: a node serves at most 64 followers; one
// more is refused with 429 (HTTP) or ResourceExhausted (gRPC), and a
// place frees when a follower leaves.
func TestEventsFollowersBounded(t *testing.T) {
	c := testcluster.New(t, 1)
	n := c.Live()[0]
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	url := "http://" + n.HTTPAddr() + "/v1/events?follow=true&scope=local"
	first, firstCancel := context.WithCancel(ctx)
	for i := range 64 {
		fctx := ctx
		if i == 0 {
			fctx = first
		}
		if f := follow(fctx, t, http.DefaultClient, url, "", &wg); f.code != http.StatusOK {
			t.Fatalf("follower %d: %d", i+1, f.code)
		}
	}
	if f := follow(ctx, t, http.DefaultClient, url, "", &wg); f.code != http.StatusTooManyRequests {
		t.Errorf("follower 65: %d, want 429", f.code)
	}
	ops := weirv1.NewOpsClient(grpcConn(t, n.GRPCAddr(), insecure.NewCredentials()))
	gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
	defer gcancel()
	st, err := ops.Events(gctx, &weirv1.EventsRequest{Follow: true})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("gRPC follower 65: %v, want ResourceExhausted", err)
	}
	firstCancel()
	testwait.For(t, 10*time.Second, "a place after a follower left", func() error {
		if f := follow(ctx, t, http.DefaultClient, url, "", &wg); f.code != http.StatusOK {
			return fmt.Errorf("follower after one left: %d", f.code)
		}
		return nil
	})
}

// TestTLSClusterReadsIncludeEveryNode: on a TLS cluster the cluster-wide
// reads fetch every member's part with the node's certificate (before,
// they asked over plain http and every other member failed); an admin
// certificate reads, a gateway certificate does not.
func TestTLSClusterReadsIncludeEveryNode(t *testing.T) {
	c := testcluster.NewWith(t, 3, testcluster.Options{TLS: true})
	c.ApplyRules(readsRules)
	gw := c.PKI.HTTPClient(tlsconf.RoleGateway, "g1")
	adm := c.PKI.HTTPClient(tlsconf.RoleAdmin, "alice")
	var ids []string
	for _, n := range c.Live() {
		denyOnce(t, gw, "https://"+n.HTTPAddr(), "apikey:"+n.ID(), "")
		ids = append(ids, n.ID())
	}
	slices.Sort(ids)
	base := "https://" + c.Live()[0].HTTPAddr()
	testwait.For(t, 20*time.Second, "every node's events, hot keys and snapshot", func() error {
		var ev clusterRead
		if code := getJSON(t, adm, base+"/v1/events", "", &ev); code != http.StatusOK {
			return fmt.Errorf("events: %d", code)
		}
		if !slices.Equal(ev.Answered, ids) || !slices.Equal(ev.nodes(), ids) {
			return fmt.Errorf("events: answered %v (failed %v), events of %v; want %v", ev.Answered, ev.Failed, ev.nodes(), ids)
		}
		for _, path := range []string{"/v1/hotkeys", "/v1/ops/snapshot"} {
			var r clusterRead
			if code := getJSON(t, adm, base+path, "", &r); code != http.StatusOK || !slices.Equal(r.Answered, ids) {
				return fmt.Errorf("%s: %d, answered %v (failed %v), want %v", path, code, r.Answered, r.Failed, ids)
			}
		}
		return nil
	})
	if code := getJSON(t, gw, base+"/v1/events", "", nil); code != http.StatusForbidden {
		t.Errorf("events with a gateway certificate: %d, want 403", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	f := follow(ctx, t, adm, base+"/v1/events?follow=true", "", &wg)
	if f.code != http.StatusOK {
		t.Fatalf("follow: %d", f.code)
	}
	testwait.For(t, 20*time.Second, "a follower seeing every node", func() error {
		for _, id := range ids {
			if !f.saw(id) {
				return fmt.Errorf("no event of %s followed", id)
			}
		}
		return nil
	})
}

// TestTokenModeReadsNeedTheReadRole: with an admin token and a read
// token, reads that show keys are refused (or, /metrics, redacted)
// without a credential and answered with the read token; the nodes fetch
// each other's parts with their gossip key's read proof.
func TestTokenModeReadsNeedTheReadRole(t *testing.T) {
	const (
		admin = "adm1n"
		read  = "r3ad"
	)
	key := peerauth.GenerateKey()
	c := testcluster.NewWith(t, 2, testcluster.Options{Config: func(cfg *node.Config) {
		cfg.GossipKeys, cfg.AdminToken, cfg.ReadToken = [][]byte{key}, admin, read
	}})
	applyWithToken(t, c, admin, readsRules)
	a, b := c.Live()[0], c.Live()[1]
	denyOnce(t, http.DefaultClient, "http://"+b.HTTPAddr(), "apikey:b", "")
	items := make([]string, 256) // hot keys are sampled one item in 32
	for i := range items {
		items[i] = `{"key":"apikey:hot","rule":"reads.r","cost":0}`
	}
	post(t, "http://"+a.HTTPAddr()+"/v1/limits/check", `{"items":[`+strings.Join(items, ",")+`]}`)

	base := "http://" + a.HTTPAddr()
	for _, path := range []string{"/v1/events", "/v1/events?scope=local", "/v1/hotkeys", "/v1/ops/snapshot", "/v1/limits/apikey:hot"} {
		if code := getJSON(t, http.DefaultClient, base+path, "", nil); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a credential: %d, want 401", path, code)
		}
		if code := getJSON(t, http.DefaultClient, base+path, "Bearer wrong", nil); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, code)
		}
		if code := getJSON(t, http.DefaultClient, base+path, "Bearer "+read, nil); code != http.StatusOK {
			t.Errorf("GET %s with the read token: %d, want 200", path, code)
		}
	}
	testwait.For(t, 20*time.Second, "b's events through a", func() error {
		var ev clusterRead
		getJSON(t, http.DefaultClient, base+"/v1/events", "Bearer "+read, &ev)
		if !slices.Contains(ev.nodes(), b.ID()) || len(ev.Answered) != 2 {
			return fmt.Errorf("answered %v (failed %v), events of %v", ev.Answered, ev.Failed, ev.nodes())
		}
		return nil
	})
	metrics := func(hdr string) string {
		req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics %q: %s", hdr, resp.Status)
		}
		return string(body)
	}
	if m := metrics(""); strings.Contains(m, "apikey:hot") || !strings.Contains(m, `key="`+events.Redact("apikey:hot")+`"`) {
		t.Errorf("/metrics without a credential: want weir_hot_key_rate's key hashed, got:\n%s", grepLines(m, "weir_hot_key_rate"))
	}
	if m := metrics("Bearer " + read); !strings.Contains(m, `key="apikey:hot"`) {
		t.Errorf("/metrics with the read token: want the key, got:\n%s", grepLines(m, "weir_hot_key_rate"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ops := weirv1.NewOpsClient(grpcConn(t, a.GRPCAddr(), insecure.NewCredentials()))
	if _, err := ops.HotKeys(ctx, &weirv1.HotKeysRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Ops.HotKeys without a credential: %v, want Unauthenticated", err)
	}
	if _, err := ops.HotKeys(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+read), &weirv1.HotKeysRequest{}); err != nil {
		t.Errorf("Ops.HotKeys with the read token: %v", err)
	}
}

// endConn records when a connection ended (a read failed or it closed).
type endConn struct {
	net.Conn
	ended chan struct{}
	once  sync.Once
}

func (c *endConn) end() { c.once.Do(func() { close(c.ended) }) }

func (c *endConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.end()
	}
	return n, err
}

func (c *endConn) Close() error { c.end(); return c.Conn.Close() }

// TestIdleConnectionsClosed (finding 7 of issue 25: 1,000 idle gRPC
// connections were held 150 s): a gRPC connection without a call and an
// HTTP keep-alive connection are closed by the node after IdleTimeout.
func TestIdleConnectionsClosed(t *testing.T) {
	c := testcluster.NewWith(t, 1, testcluster.Options{Config: func(cfg *node.Config) { cfg.IdleTimeout = 500 * time.Millisecond }})
	n := c.Live()[0]
	conn := &endConn{ended: make(chan struct{})}
	cc, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			conn.Conn = raw
			return conn, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.ended:
	case <-time.After(30 * time.Second):
		t.Error("an idle gRPC connection is still open after 30 s (IdleTimeout 500 ms)")
	}

	raw, err := net.Dial("tcp", n.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := io.WriteString(raw, "GET /healthz HTTP/1.1\r\nHost: weir\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(raw)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = raw.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("an idle HTTP keep-alive connection: read %v, want EOF (closed by the node)", err)
	}
}
