package tracing

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/limit"
)

const (
	tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

func TestTraceparentRoundTrip(t *testing.T) {
	sc := Parse(tp1)
	if !sc.IsValid() || !sc.IsSampled() || !sc.IsRemote() {
		t.Fatalf("Parse(%q) = %+v", tp1, sc)
	}
	if got := Traceparent(sc); got != tp1 {
		t.Fatalf("Traceparent = %q, want %q", got, tp1)
	}
	unsampled := tp1[:53] + "00"
	if got := Traceparent(Parse(unsampled)); got != "" {
		t.Fatalf("an unsampled context gave %q, want none", got)
	}
	for _, bad := range []string{"", "00-xyz", tp1[:54], "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-zzf067aa0ba902b7-01"} {
		if Parse(bad).IsValid() {
			t.Errorf("Parse(%q) is valid", bad)
		}
	}
}

func TestFromHeader(t *testing.T) {
	h := http.Header{}
	if ctx := FromHeader(context.Background(), h); trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("a span context from no header")
	}
	h.Set("traceparent", tp1)
	sc := trace.SpanContextFromContext(FromHeader(context.Background(), h))
	if Traceparent(sc) != tp1 {
		t.Fatalf("FromHeader gave %+v", sc)
	}
}

// Stamp hands ctx's span to the items of its trace (and, at the entry, to
// untraced ones), never to another trace's items.
func TestStamp(t *testing.T) {
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), Parse(tp1))
	items := []limit.Item{{Trace: ""}, {Trace: tp2}, {Trace: tp1[:36] + "1111111111111111-01"}}
	Stamp(ctx, items, false)
	if items[0].Trace != "" || items[1].Trace != tp2 || items[2].Trace != tp1 {
		t.Fatalf("Stamp(untraced=false): %+v", items)
	}
	Stamp(ctx, items, true)
	if items[0].Trace != tp1 || items[1].Trace != tp2 {
		t.Fatalf("Stamp(untraced=true): %+v", items)
	}
	Stamp(context.Background(), items[:1], true) // no span: nothing changes
	if items[0].Trace != tp1 {
		t.Fatal("Stamp without a span changed an item")
	}
}
