package test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/weirlimit/weir/client"
	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/internal/tracing/otlp"
	"github.com/weirlimit/weir/node"
	"github.com/weirlimit/weir/proto/weirv1"
)

// otlpReceiver is an in-process OTLP/gRPC collector: it keeps every span
// exported to it, with the service.instance.id of the node that sent it.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []recvSpan
}

type recvSpan struct {
	node string
	span *tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var inst string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.instance.id" {
				inst = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, recvSpan{node: inst, span: s})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// trace returns the spans of trace id (hex).
func (r *otlpReceiver) trace(id string) []recvSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recvSpan
	for _, s := range r.spans {
		if hex.EncodeToString(s.span.GetTraceId()) == id {
			out = append(out, s)
		}
	}
	return out
}

func startReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, rcv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return rcv, "http://" + lis.Addr().String()
}

// tracedCluster starts a 3-node cluster whose nodes export spans to an
// in-process OTLP receiver with the real exporter, with the test's rule
// t.r applied. Sampling ratio 0: only a caller's sampled traceparent
// starts a trace (parent-based), so nothing else reaches the receiver.
// flush exports what every provider made (nodes' and those from
// provider) and stops them.
func tracedCluster(t *testing.T) (c *cluster, rcv *otlpReceiver, provider func(instance string) trace.TracerProvider, flush func()) {
	rcv, endpoint := startReceiver(t)
	var (
		mu        sync.Mutex
		shutdowns []func(context.Context) error
	)
	provider = func(instance string) trace.TracerProvider {
		tp, shutdown, err := otlp.New(context.Background(), otlp.Config{Endpoint: endpoint, Ratio: 0, Service: "weir-test", Instance: instance})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		shutdowns = append(shutdowns, shutdown)
		mu.Unlock()
		return tp
	}
	flush = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range shutdowns {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := s(ctx); err != nil {
				t.Errorf("tracer shutdown: %v", err)
			}
			cancel()
		}
		shutdowns = nil
	}
	t.Cleanup(flush)
	tc := testcluster.NewConfigured(t, 3, func(cfg *node.Config) { cfg.Tracer = provider(cfg.ID) })
	c = wrapCluster(t, tc)
	c.WaitStable(3)
	c.ApplyRules(`rules:
  - id: t.r
    match: {route: /t}
    key: apikey
    rate: 100
    period: 1m
    timeout: 5s # the SDK waits for the owner under -race on a loaded machine (not its fail mode)
`)
	return c, rcv, provider, flush
}

// traceSpans waits for want spans of trace id (-want: at least that many)
// and returns them by name (each name once).
func traceSpans(t *testing.T, rcv *otlpReceiver, id string, want int) map[string]recvSpan {
	t.Helper()
	var spans []recvSpan
	testwait.For(t, 10*time.Second, "the spans of the trace", func() error {
		if spans = rcv.trace(id); len(spans) < max(want, -want) {
			return fmt.Errorf("%d spans: %v", len(spans), describe(spans))
		}
		return nil
	})
	if want > 0 && len(spans) != want {
		t.Errorf("%d spans in the trace, want %d: %v", len(spans), want, describe(spans))
	}
	byName := map[string]recvSpan{}
	for _, s := range spans {
		if _, dup := byName[s.span.GetName()]; dup {
			t.Errorf("two %s spans: %v", s.span.GetName(), describe(spans))
		}
		byName[s.span.GetName()] = s
	}
	return byName
}

// wantSpan checks that the span named name came from node and is the
// child of parent (hex).
func wantSpan(t *testing.T, spans map[string]recvSpan, name, node, parent string) string {
	t.Helper()
	s, ok := spans[name]
	if !ok {
		t.Fatalf("no %s span", name)
	}
	if s.node != node {
		t.Errorf("%s from %q, want %q", name, s.node, node)
	}
	if got := hex.EncodeToString(s.span.GetParentSpanId()); got != parent {
		t.Errorf("%s parent %s, want %s", name, got, parent)
	}
	return hex.EncodeToString(s.span.GetSpanId())
}

const (
	testTraceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	testCallerSpan = "00f067aa0ba902b7"
)

// TestTracingThroughNonOwner sends one check over HTTP, with a sampled W3C
// traceparent, to a node that does not own the key, in a real 3-node
// cluster. One trace arrives: the entry node's weir.check (child of the
// caller's span), its weir.forward (child of weir.check) and the owner's
// weir.decide (child of weir.forward).
func TestTracingThroughNonOwner(t *testing.T) {
	c, rcv, _, flush := tracedCluster(t)
	key := "apikey:traced"
	owner := c.ownerOf(key)
	entry := c.Nodes[(owner+1)%3]

	req, err := http.NewRequest("POST", "http://"+entry.HTTPAddr()+"/v1/limits/check", bytes.NewBufferString(`{"key":"`+key+`","rule":"t.r","cost":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+testTraceID+"-"+testCallerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check: %d", resp.StatusCode)
	}
	flush()
	spans := traceSpans(t, rcv, testTraceID, 3)
	chk := wantSpan(t, spans, "weir.check", entry.ID(), testCallerSpan)
	fwd := wantSpan(t, spans, "weir.forward", entry.ID(), chk)
	wantSpan(t, spans, "weir.decide", c.Nodes[owner].ID(), fwd)
}

// TestTracingThroughSDK sends one request with a sampled traceparent
// through the SDK's net/http middleware: the SDK's weir.client.check (child
// of the caller's span) and the owner's weir.check (its child) make one
// trace.
func TestTracingThroughSDK(t *testing.T) {
	c, rcv, provider, flush := tracedCluster(t)
	cfg := client.DefaultConfig()
	cfg.Cluster, cfg.GatewayID, cfg.Tracer = c.GRPCAddrs(), "gw", provider("gw")
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	testwait.For(t, 20*time.Second, "the gateway to hold the rules", func() error {
		if cl.RulesVersion() == 0 {
			return fmt.Errorf("no rules yet")
		}
		return nil
	})
	h := cl.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	req := httptest.NewRequest("GET", "/t", nil)
	req.Header.Set(cfg.APIKeyHeader, "traced")
	req.Header.Set("traceparent", "00-"+testTraceID+"-"+testCallerSpan+"-01")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("middleware answered %d", w.Code)
	}
	flush()
	owner := c.Nodes[c.ownerOf("apikey:traced")].ID()
	spans := traceSpans(t, rcv, testTraceID, -2)
	sdk := spanID(t, spans, "weir.client.check")
	if chk := spans["weir.check"]; chk.node != owner && chk.span != nil {
		// The SDK's ring view was not yet the cluster's (it was
		// learning the members): the node it asked forwarded.
		spans = traceSpans(t, rcv, testTraceID, 4)
		fwd := wantSpan(t, spans, "weir.forward", chk.node, wantSpan(t, spans, "weir.check", chk.node, sdk))
		wantSpan(t, spans, "weir.decide", owner, fwd)
		return
	}
	if len(spans) != 2 {
		t.Errorf("spans %v, want weir.client.check and weir.check", spans)
	}
	wantSpan(t, spans, "weir.client.check", "gw", testCallerSpan)
	wantSpan(t, spans, "weir.check", owner, sdk)
}

// spanID is the id (hex) of the span named name.
func spanID(t *testing.T, spans map[string]recvSpan, name string) string {
	t.Helper()
	s, ok := spans[name]
	if !ok {
		t.Fatalf("no %s span", name)
	}
	return hex.EncodeToString(s.span.GetSpanId())
}

func describe(spans []recvSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "[%s %s span=%x parent=%x] ", s.node, s.span.GetName(), s.span.GetSpanId(), s.span.GetParentSpanId())
	}
	return b.String()
}

// TestTracingThroughGRPCMetadata sends a gRPC Check (to the key's owner)
// and an Envoy ShouldRateLimit, each with a sampled W3C traceparent in the
// call's metadata, as a gRPC caller instrumented with OpenTelemetry sends
// it: each node's weir.check joins the caller's trace as the child of its
// span.
func TestTracingThroughGRPCMetadata(t *testing.T) {
	c, rcv, _, flush := tracedCluster(t)
	c.ApplyRules(`rules:
  - id: t.r
    match: {route: /t}
    key: apikey
    rate: 100
    period: 1m
    timeout: 5s
  - id: t.edge
    match: {domain: edge, descriptor: [{key: tenant}]}
    rate: 100
    period: 1m
    timeout: 5s
`)
	const checkTrace, rlsTrace = "5bf92f3577b34da6a3ce929d0e0e4736", "6bf92f3577b34da6a3ce929d0e0e4736"
	key := "apikey:traced-grpc"
	owner := c.Nodes[c.ownerOf(key)]
	dial := func(addr string) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md := func(traceID string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+testCallerSpan+"-01")
	}
	resp, err := weirv1.NewLimiterClient(dial(owner.GRPCAddr())).Check(md(checkTrace), &weirv1.CheckRequest{Items: []*weirv1.CheckItem{{Key: key, Rule: "t.r", Cost: 1}}})
	if err != nil || len(resp.GetResults()) != 1 || !resp.GetResults()[0].GetAllowed() {
		t.Fatalf("Check: %v, %v", resp, err)
	}
	entry := c.Nodes[0]
	rls := rlsv3.NewRateLimitServiceClient(dial(entry.GRPCAddr()))
	req := &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "traced"}}}}}
	testwait.For(t, 10*time.Second, "the entry node to hold the descriptor rule", func() error {
		// Untraced (no traceparent, sampling ratio 0): no span.
		rl, err := rls.ShouldRateLimit(ctx, req)
		if err != nil || rl.GetStatuses()[0].GetCurrentLimit() == nil {
			return fmt.Errorf("ShouldRateLimit: %v, %v", rl, err)
		}
		return nil
	})
	rl, err := rls.ShouldRateLimit(md(rlsTrace), req)
	if err != nil || rl.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v, %v", rl, err)
	}
	flush()
	wantSpan(t, traceSpans(t, rcv, checkTrace, 1), "weir.check", owner.ID(), testCallerSpan)
	wantSpan(t, traceSpans(t, rcv, rlsTrace, -1), "weir.check", entry.ID(), testCallerSpan)
}
