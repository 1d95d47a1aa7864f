package forward

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/internal/tracing"
)

// traceForward starts the span of a forward batch to dest when one of its
// items is sampled (nil otherwise): the child of the first sampled item,
// linked to the others; that trace's items go on as its children.
func (t *Table) traceForward(dest string, batch []*Call) trace.Span {
	traced := false
	for _, c := range batch {
		if tracing.Traced(c.items) {
			traced = true
			break
		}
	}
	if !traced {
		return nil
	}
	ctx, span := tracing.Start(t.ctx, t.cfg.Tracer, "weir.forward", trace.SpanKindClient, func(yield func(string) bool) {
		for _, c := range batch {
			for tp := range tracing.Traces(c.items) {
				if !yield(tp) {
					return
				}
			}
		}
	})
	span.SetAttributes(attribute.String("weir.node", t.cfg.Self), attribute.String("weir.peer", dest))
	for _, c := range batch {
		tracing.Stamp(ctx, c.items, false)
	}
	return span
}
