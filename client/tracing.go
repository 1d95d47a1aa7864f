package client

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/internal/tracing"
)

// traceSend starts the span of one call to the cluster (c.tracer is set):
// the child of ctx's span. When it is sampled, each of cl's items carries
// its context to the node, which continues the trace (weir.check there).
func (c *Client) traceSend(ctx context.Context, cl *call) trace.Span {
	_, span := c.tracer.Start(ctx, "weir.client.check", trace.WithSpanKind(trace.SpanKindClient))
	if tp := tracing.Traceparent(span.SpanContext()); tp != "" {
		for _, it := range cl.items {
			it.Traceparent = tp
		}
	}
	return span
}
