package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The standard OpenTelemetry environment variables that turn trace export
// on (https://opentelemetry.io/docs/specs/otel/protocol/exporter/).
const (
	envOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// otlpFlagUsage describes --otlp-endpoint.
const otlpFlagUsage = "export a span of every attempt over OTLP/HTTP to this collector URL, e.g. http://127.0.0.1:4318 (/v1/traces is appended unless the path ends in it; default: off, unless " +
	envOTLPEndpoint + " or " + envOTLPTracesEndpoint + " is set; docs/tracing.md)"

// tracingShutdownTimeout bounds the flush of the spans still buffered when
// a command ends.
const tracingShutdownTimeout = 5 * time.Second

// newTracerProvider returns the tracer provider of a command: an SDK
// provider exporting over OTLP/HTTP when endpoint (--otlp-endpoint) is set
// or the standard environment names an endpoint, else nil (tracing off:
// the engine starts no spans). OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn the environment's export off; the other
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, compression,
// certificates) and OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES apply as
// the SDK reads them. The service is named "redrive" by default. shutdown
// flushes and stops the export; it is a no-op when tracing is off.
func newTracerProvider(ctx context.Context, endpoint string, logger *slog.Logger) (tp trace.TracerProvider, shutdown func(), err error) {
	noop := func() {}
	var opts []otlptracehttp.Option
	switch {
	case endpoint != "":
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, noop, flagErrorf("otlp-endpoint", "%q is not an http or https URL (e.g. http://127.0.0.1:4318)", endpoint)
		}
		if !strings.HasSuffix(u.Path, "/v1/traces") {
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	case os.Getenv(envOTLPEndpoint) == "" && os.Getenv(envOTLPTracesEndpoint) == "",
		strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true"),
		strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none"):
		return nil, noop, nil
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, noop, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the default name.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "redrive")),
		resource.WithTelemetrySDK(), resource.WithFromEnv(), resource.WithProcessPID(), resource.WithHost())
	if err != nil {
		logger.Warn("tracing: part of the resource could not be detected", "err", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	logger.Info("tracing: exporting attempt spans over OTLP/HTTP")
	return sdk, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := sdk.Shutdown(sctx); err != nil {
			logger.Warn("tracing: flushing the last spans failed", "err", err)
		}
	}, nil
}
