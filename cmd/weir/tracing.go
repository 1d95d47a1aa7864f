package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/internal/tracing"
	"github.com/weirlimit/weir/internal/tracing/otlp"
)

// tracingFlags are the OpenTelemetry flags of `weir node`, `weir dev` and
// `weir gateway` (docs/operations.md, tracing).
type tracingFlags struct {
	endpoint string
	ratio    float64
}

func (f *tracingFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.endpoint, "otlp-endpoint", "", "export trace spans over OTLP/gRPC to this collector (`URL` http://host:4317 for plaintext, https://…, or host:port); "+
		"empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, and with neither tracing is off")
	fs.Float64Var(&f.ratio, "trace-ratio", 0.01, "share of new traces sampled (0 to 1); a request with a W3C traceparent follows its caller's decision")
}

// provider returns the tracer provider for service (nil when tracing is
// off) and a stop that flushes the spans still queued.
func (f *tracingFlags) provider(cmd *cobra.Command, service, instance string, logger *slog.Logger) (trace.TracerProvider, func(), error) {
	cfg := otlp.Config{Endpoint: f.endpoint, Ratio: f.ratio, Service: service, Instance: instance}
	if f.ratio < 0 || f.ratio > 1 {
		return nil, nil, usageErr(cmd, "--trace-ratio %v: must be between 0 and 1", f.ratio)
	}
	tp, shutdown, err := otlp.New(context.Background(), cfg)
	if err != nil {
		return nil, nil, err
	}
	if tp == nil {
		return nil, func() {}, nil
	}
	logger.Info("tracing on: exporting sampled spans over OTLP", "endpoint", f.endpoint, "ratio", f.ratio)
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			logger.Warn("tracing: flushing spans failed", "err", err)
		}
	}, nil
}

// traceProxy is the gateway's span around each proxied request: a
// weir.gateway span, the child of the caller's W3C traceparent (or a new
// trace, sampled at --trace-ratio), whose context the SDK's check and the
// upstream request carry: the upstream sees the gateway's span as its
// parent, not the caller's.
func traceProxy(t trace.Tracer, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := t.Start(tracing.FromHeader(r.Context(), r.Header), "weir.gateway", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if span.IsRecording() {
			span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path))
		}
		r = r.WithContext(ctx)
		r.Header = r.Header.Clone() // the caller's request stays as it came
		tracing.ToHeader(ctx, r.Header)
		next.ServeHTTP(w, r)
	})
}
