package node

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/limit"
)

// Tracing hooks (Config.Tracer; nil n.tracer means off and none of these
// run). The spans: weir.check where a check enters this node (an API, the
// forward-auth edge), weir.forward for a forward batch that carries a
// sampled item, weir.decide where a peer's forwarded items are decided.

// traceCheck starts the entry span of a check: the child of ctx's span
// (an HTTP request's traceparent) or of the first sampled item (an SDK's).
func (n *Node) traceCheck(ctx context.Context, items []limit.Item) (context.Context, trace.Span) {
	ctx, span := tracing.Start(ctx, n.tracer, "weir.check", trace.SpanKindServer, tracing.Traces(items))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("weir.node", n.cfg.ID), attribute.Int("weir.items", len(items)))
	}
	return ctx, span
}
