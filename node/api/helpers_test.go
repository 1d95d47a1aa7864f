package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/internal/httpjson"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// testBackend stands in for the node: rules come from a real rulesraft
// Store, and Check decides with the real bucket package over an in-test
// counter map on a fixed clock. It is a fixture, not a copy of the node's
// logic (no ring, shards or forwarding); the node itself is tested end to
// end in its own package and in test/.
type testBackend struct {
	store    *rulesraft.Store
	now      int64 // unix nanoseconds; the fixture's fixed clock
	leader   atomic.Pointer[string]
	ready    atomic.Pointer[error]
	checkErr atomic.Pointer[error] // when set, Check and GetLimits fail with it
	gateways atomic.Uint32

	mu       sync.Mutex
	counters map[string]bucket.State // rule + "\x00" + key
}

var _ Backend = (*testBackend)(nil)

func (b *testBackend) decide(it limit.Item) limit.Result {
	set := b.store.Current()
	r, ok := set.Rule(it.Rule)
	if !ok {
		return limit.Result{Code: limit.CodeUnknownRule, Err: "unknown rule " + it.Rule, RetryAfter: limit.Never}
	}
	var ov *rules.Override
	if o, ok := set.Override(r.ID, it.Key); ok && o.Active(time.Unix(0, b.now)) {
		ov = &o
	}
	lim, blocked := rules.Effective(&r, ov)
	if blocked {
		return limit.Result{Limit: lim.Capacity(), RetryAfter: limit.Never}
	}
	id := r.ID + "\x00" + it.Key
	b.mu.Lock()
	st, res := bucket.Decide(b.counters[id], lim, it.Cost, b.now)
	b.counters[id] = st
	b.mu.Unlock()
	return limit.Result{Allowed: res.Allowed, Remaining: res.Remaining, Limit: res.Limit,
		Reset: res.ResetAfter, RetryAfter: res.RetryAfter, Shadow: r.Shadow, Window: r.Period.D()}
}

func (b *testBackend) failure() error {
	if p := b.checkErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (b *testBackend) Check(_ context.Context, items []limit.Item, out []limit.Result) error {
	if err := b.failure(); err != nil {
		return err
	}
	for i, it := range items {
		out[i] = b.decide(it)
	}
	return nil
}

func (b *testBackend) GetLimits(_ context.Context, key string) ([]KeyLimit, error) {
	if err := b.failure(); err != nil {
		return nil, err
	}
	var out []KeyLimit
	for _, r := range b.store.Current().Rules {
		out = append(out, KeyLimit{Rule: r.ID, Result: b.decide(limit.Item{Key: key, Rule: r.ID})})
	}
	return out, nil
}

func (b *testBackend) Members(context.Context) (Members, error) {
	role := "follower"
	if b.store.IsLeader() {
		role = "leader"
	}
	return Members{RingVersion: 7, PartitionCount: 271, ReplicationFactor: 2, Members: []Member{{
		ID: b.store.ID(), RaftAddr: b.store.Addr(), GRPCAddr: b.leaderAddr(), State: "alive", RaftRole: role, PartitionsOwned: 271,
	}}}, nil
}

func (b *testBackend) leaderAddr() string {
	if p := b.leader.Load(); p != nil {
		return *p
	}
	return ""
}

func (b *testBackend) Rules() RuleStore { return b.store }

func (b *testBackend) LeaderGRPC() (string, bool) {
	a := b.leaderAddr()
	return a, a != ""
}

func (b *testBackend) Ready() error {
	if p := b.ready.Load(); p != nil {
		return *p
	}
	return nil
}

func (b *testBackend) Gateways() uint32 { return b.gateways.Load() }

// testNode is one Server over a real single-member (or joined) Store,
// served by a real HTTP server and a real gRPC server on loopback.
type testNode struct {
	store *rulesraft.Store
	b     *testBackend
	srv   *Server
	http  *httptest.Server
	grpc  string // gRPC address
	conn  *grpc.ClientConn
}

type nodeOpts struct {
	id        string
	token     string
	maxBody   int64
	bootstrap bool
}

func openStore(t testing.TB, id string) *rulesraft.Store {
	t.Helper()
	cfg := rulesraft.DefaultConfig()
	cfg.ID = id
	cfg.DataDir = t.TempDir()
	st, err := rulesraft.Open(cfg)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func startNode(t testing.TB, o nodeOpts) *testNode {
	t.Helper()
	if o.id == "" {
		o.id = "n1"
	}
	st := openStore(t, o.id)
	if o.bootstrap {
		if err := st.Bootstrap(nil); err != nil {
			t.Fatalf("bootstrap: %v", err)
		}
		// Raft sets its state to leader before it records itself as the
		// leader (LeaderWithID): wait for both, as GET /v1/cluster reads both.
		testwait.Until(t, "leadership", func() bool { id, _ := st.Leader(); return st.IsLeader() && id != "" })
	}
	b := &testBackend{store: st, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(), counters: map[string]bucket.State{}}
	srv, err := New(Config{AdminToken: o.token, MaxBodyBytes: o.maxBody, MaxWait: 5 * time.Second,
		MembersPoll: 10 * time.Millisecond, Registry: prometheus.NewRegistry(),
		Now: func() time.Time { return time.Unix(0, b.now) }}, b)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	hs := httptest.NewServer(srv.Handler())
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{store: st, b: b, srv: srv, http: hs, grpc: lis.Addr().String(), conn: conn}
	if o.bootstrap {
		b.leader.Store(&n.grpc)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Close()
		g.Stop()
		<-served
		hs.Close()
	})
	return n
}

type reply struct {
	code   int
	body   []byte
	header http.Header
}

func (r reply) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %q: %v", r.body, err)
	}
}

func (r reply) errBody(t *testing.T) httpjson.ErrorBody {
	t.Helper()
	var e httpjson.ErrorBody
	r.json(t, &e)
	return e
}

// do sends an HTTP request; headers are "Name: value" strings.
func (n *testNode) do(t *testing.T, method, path string, body any, headers ...string) reply {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, n.http.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil { // the types the endpoints take (headers may override)
		if strings.Contains(path, ":apply") {
			req.Header.Set("Content-Type", "application/yaml")
		} else {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := n.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, out, resp.Header}
}

func (n *testNode) version() uint64 { return n.store.Current().Version }

const rulesYAML = `rules:
  - id: orders.write
    match: {route: /v1/orders, method: POST}
    key: apikey
    rate: 10
    period: 1s
    burst: 20
  - id: search
    match: {route: /v1/search}
    key: ip
    algorithm: fixed_window
    rate: 100
    period: 1m
`
