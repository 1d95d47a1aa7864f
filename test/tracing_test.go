package test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/internal/testcluster"
	"github.com/weirlimit/weir/internal/testwait"
	"github.com/weirlimit/weir/internal/tracing/otlp"
	"github.com/weirlimit/weir/node"
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

// TestTracingThroughNonOwner sends one check over HTTP, with a sampled W3C
// traceparent, to a node that does not own the key, in a real 3-node
// cluster whose nodes export to an in-process OTLP receiver with the real
// exporter. One trace arrives: the entry node's weir.check (child of the
// caller's span), its weir.forward (child of weir.check) and the owner's
// weir.decide (child of weir.forward).
func TestTracingThroughNonOwner(t *testing.T) {
	rcv, endpoint := startReceiver(t)
	var shutdowns []func(context.Context) error
	var mu sync.Mutex
	tc := testcluster.NewConfigured(t, 3, func(cfg *node.Config) {
		// Ratio 0: only the caller's sampled traceparent starts a trace
		// (parent-based), so nothing else reaches the receiver.
		tp, shutdown, err := otlp.New(context.Background(), otlp.Config{Endpoint: endpoint, Ratio: 0, Service: "weir-node", Instance: cfg.ID})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		shutdowns = append(shutdowns, shutdown)
		mu.Unlock()
		cfg.Tracer = tp
	})
	c := wrapCluster(t, tc)
	c.WaitStable(3)
	c.ApplyRules(`rules:
  - id: t.r
    match: {route: /t}
    key: apikey
    rate: 100
    period: 1m
`)
	key := "apikey:traced"
	owner := c.ownerOf(key)
	entry := c.Nodes[(owner+1)%3]

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	const callerSpan = "00f067aa0ba902b7"
	req, err := http.NewRequest("POST", "http://"+entry.HTTPAddr()+"/v1/limits/check", bytes.NewBufferString(`{"key":"`+key+`","rule":"t.r","cost":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check: %d", resp.StatusCode)
	}
	// Flush every node's exporter (each provider's shutdown exports what
	// it queued).
	mu.Lock()
	for _, s := range shutdowns {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := s(ctx); err != nil {
			t.Errorf("tracer shutdown: %v", err)
		}
		cancel()
	}
	mu.Unlock()

	var spans []recvSpan
	testwait.For(t, 10*time.Second, "three spans of the trace", func() error {
		spans = rcv.trace(traceID)
		if len(spans) < 3 {
			return fmt.Errorf("%d spans: %v", len(spans), describe(spans))
		}
		return nil
	})
	byName := map[string]recvSpan{}
	for _, s := range spans {
		if _, dup := byName[s.span.GetName()]; dup {
			t.Errorf("two %s spans: %v", s.span.GetName(), describe(spans))
		}
		byName[s.span.GetName()] = s
	}
	chk, fwd, dec := byName["weir.check"], byName["weir.forward"], byName["weir.decide"]
	if chk.span == nil || fwd.span == nil || dec.span == nil {
		t.Fatalf("want weir.check, weir.forward and weir.decide; got %v", describe(spans))
	}
	ownerID := c.Nodes[owner].ID()
	for _, w := range []struct {
		s            recvSpan
		node, parent string
	}{
		{chk, entry.ID(), callerSpan},
		{fwd, entry.ID(), hex.EncodeToString(chk.span.GetSpanId())},
		{dec, ownerID, hex.EncodeToString(fwd.span.GetSpanId())},
	} {
		if w.s.node != w.node {
			t.Errorf("%s from node %q, want %q", w.s.span.GetName(), w.s.node, w.node)
		}
		if got := hex.EncodeToString(w.s.span.GetParentSpanId()); got != w.parent {
			t.Errorf("%s parent %s, want %s", w.s.span.GetName(), got, w.parent)
		}
	}
	if len(spans) != 3 {
		t.Errorf("%d spans in the trace, want 3: %v", len(spans), describe(spans))
	}
}

func describe(spans []recvSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "[%s %s span=%x parent=%x] ", s.node, s.span.GetName(), s.span.GetSpanId(), s.span.GetParentSpanId())
	}
	return b.String()
}
