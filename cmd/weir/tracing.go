package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"

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
