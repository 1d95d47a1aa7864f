// Package otlp builds the OpenTelemetry SDK's tracer provider that exports
// Weir's spans over OTLP/gRPC. Only the weir binary and tests link it: the
// node and the gateway SDK take a trace.TracerProvider (the API) and never
// an exporter (test/deps_test.go).
package otlp

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config says where spans go and how many are kept.
type Config struct {
	// Endpoint is the collector's OTLP/gRPC address: a URL
	// (http://host:4317 for plaintext, https://host:4317) or host:port
	// (TLS unless OTEL_EXPORTER_OTLP_INSECURE=true). Empty: the standard
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT
	// variables; with neither, tracing is off.
	Endpoint string
	// Ratio is the share of new traces sampled (0 to 1); a request that
	// arrives with a sampled (or unsampled) traceparent follows its parent.
	Ratio float64
	// Service is the service.name resource attribute (weir-node,
	// weir-gateway); Instance, when set, is service.instance.id.
	Service, Instance string
}

// Enabled reports whether cfg (or the environment) names a collector.
func (cfg Config) Enabled() bool {
	return cfg.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// New returns a tracer provider exporting to cfg's collector, and its
// shutdown (which flushes the spans still queued). It returns a nil
// provider and a no-op shutdown when tracing is off (Enabled false). The
// other OTEL_EXPORTER_OTLP_* variables (headers, certificates, timeout,
// compression) apply as the exporter documents them.
func New(ctx context.Context, cfg Config) (trace.TracerProvider, func(context.Context) error, error) {
	none := func(context.Context) error { return nil }
	if !cfg.Enabled() {
		return nil, none, nil
	}
	if cfg.Ratio < 0 || cfg.Ratio > 1 {
		return nil, none, fmt.Errorf("trace ratio %v: want 0 to 1", cfg.Ratio)
	}
	var opts []otlptracegrpc.Option
	switch e := cfg.Endpoint; {
	case strings.Contains(e, "://"):
		opts = append(opts, otlptracegrpc.WithEndpointURL(e))
	case e != "":
		opts = append(opts, otlptracegrpc.WithEndpoint(e))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, none, fmt.Errorf("otlp exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.Service)}
	if cfg.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.Instance))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Ratio))),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	)
	return tp, tp.Shutdown, nil
}
