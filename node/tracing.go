package node

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/internal/tracing"
)

// Tracing hooks (Config.Tracer; nil n.tracer means off and none of these
// run). The spans: weir.check where a check enters this node (an API, the
// forward-auth edge: node/router), weir.forward for a forward batch that carries a
// sampled item, weir.decide where a peer's forwarded items are decided.

// traceForward starts the span of a forward batch to dest when one of its
// items is sampled (nil otherwise): the child of the first sampled item,
// linked to the others; that trace's items go on as its children.
func (n *Node) traceForward(dest string, batch []*fwdCall) trace.Span {
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
	ctx, span := tracing.Start(n.ctx, n.tracer, "weir.forward", trace.SpanKindClient, func(yield func(string) bool) {
		for _, c := range batch {
			for tp := range tracing.Traces(c.items) {
				if !yield(tp) {
					return
				}
			}
		}
	})
	span.SetAttributes(attribute.String("weir.node", n.cfg.ID), attribute.String("weir.peer", dest))
	for _, c := range batch {
		tracing.Stamp(ctx, c.items, false)
	}
	return span
}
