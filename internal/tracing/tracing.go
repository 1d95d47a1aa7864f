// Package tracing is the small part of OpenTelemetry tracing that the node
// and the gateway SDK share: W3C trace context in and out of HTTP headers
// and check items, and the spans a batch starts for the sampled items it
// carries. It uses the OpenTelemetry API only (go.opentelemetry.io/otel/trace
// and propagation); the SDK and the OTLP exporter live in internal/tracing/otlp,
// which only the weir binary and tests link.
//
// Checks travel in batches (a forward carries many callers' items), so a
// sampled item carries its own trace context (limit.Item.Trace, a
// traceparent value) and a batch's span is the child of its first sampled
// item and links to every other one.
//
// Off costs nothing measurable: a nil trace.Tracer means off, and the
// helpers below look at an item's Trace (an empty string for every
// unsampled item) and nothing else.
package tracing

import (
	"context"
	"iter"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/limit"
)

// Name is the instrumentation scope of Weir's spans.
const Name = "github.com/weirlimit/weir"

var w3c propagation.TraceContext

// FromHeader returns ctx with the remote span context of h's traceparent
// header, if it has a valid one (ctx unchanged otherwise).
func FromHeader(ctx context.Context, h http.Header) context.Context {
	if len(h["Traceparent"]) == 0 {
		return ctx
	}
	return w3c.Extract(ctx, propagation.HeaderCarrier(h))
}

// FromGRPC returns ctx with the remote span context of the traceparent in
// ctx's incoming gRPC metadata, if it has a valid one (ctx unchanged
// otherwise). value reads one key of it: metadata.ValueFromIncomingContext
// (passed in, so this package links no gRPC).
func FromGRPC(ctx context.Context, value func(ctx context.Context, key string) []string) context.Context {
	tp := value(ctx, "traceparent")
	if len(tp) == 0 {
		return ctx
	}
	return w3c.Extract(ctx, mdCarrier{"traceparent": tp, "tracestate": value(ctx, "tracestate")})
}

// mdCarrier carries trace context in gRPC metadata's shape: lower-case
// keys, several values each.
type mdCarrier map[string][]string

func (c mdCarrier) Get(key string) string {
	if v := c[strings.ToLower(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { c[strings.ToLower(key)] = []string{value} }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// ToHeader sets h's traceparent (and tracestate) from ctx's span context.
func ToHeader(ctx context.Context, h http.Header) {
	w3c.Inject(ctx, propagation.HeaderCarrier(h))
}

// Traceparent is the W3C traceparent of sc when it is sampled, else "":
// only sampled items carry a trace.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsSampled() || !sc.IsValid() {
		return ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	return "00-" + tid.String() + "-" + sid.String() + "-" + sc.TraceFlags().String()
}

// Parse reads a traceparent value into a remote span context (invalid when
// tp is not one).
func Parse(tp string) trace.SpanContext {
	// 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>
	if len(tp) != 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return trace.SpanContext{}
	}
	tid, err := trace.TraceIDFromHex(tp[3:35])
	if err != nil {
		return trace.SpanContext{}
	}
	sid, err := trace.SpanIDFromHex(tp[36:52])
	if err != nil {
		return trace.SpanContext{}
	}
	var flags trace.TraceFlags
	if tp[53] == '0' && tp[54] == '1' {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true})
}

// sameTrace reports whether two traceparent values are of one trace.
func sameTrace(a, b string) bool {
	return len(a) == 55 && len(b) == 55 && a[3:35] == b[3:35]
}

// Traced reports whether any item carries a trace context.
func Traced(items []limit.Item) bool {
	for i := range items {
		if items[i].Trace != "" {
			return true
		}
	}
	return false
}

// Traces yields the trace context of each sampled item.
func Traces(items []limit.Item) iter.Seq[string] {
	return func(yield func(string) bool) {
		for i := range items {
			if tp := items[i].Trace; tp != "" && !yield(tp) {
				return
			}
		}
	}
}

// Start starts a span named name for a batch: the child of ctx's span
// context when it has a valid one, else of the first of traces, linked to
// every other of traces. It returns ctx carrying the span. t must not be
// nil.
func Start(ctx context.Context, t trace.Tracer, name string, kind trace.SpanKind, traces iter.Seq[string]) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	var links []trace.Link
	for tp := range traces {
		sc := Parse(tp)
		if !sc.IsValid() {
			continue
		}
		if !parent.IsValid() {
			parent = sc
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
			continue
		}
		if sc.TraceID() != parent.TraceID() || sc.SpanID() != parent.SpanID() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithLinks(links...))
}

// Stamp gives each item of ctx's sampled trace (and, with untraced, each
// item that has none) ctx's span context as its own: the items that go on
// to a peer are children of the span that sends them. Items of other
// traces keep theirs. Nothing changes when ctx carries no sampled span.
func Stamp(ctx context.Context, items []limit.Item, untraced bool) {
	tp := Traceparent(trace.SpanContextFromContext(ctx))
	if tp == "" {
		return
	}
	for i := range items {
		if it := &items[i]; (untraced && it.Trace == "") || sameTrace(it.Trace, tp) {
			it.Trace = tp
		}
	}
}
