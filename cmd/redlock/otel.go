package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
	redlockotel "github.com/quorumlabs/redlock/otel"
)

// otelFlagUsage is the --otel flag's help, shared by the commands that take it.
const otelFlagUsage = "export the lock's metrics and spans over OTLP/HTTP, to the endpoint of the standard OTEL_EXPORTER_OTLP_* variables (default http://localhost:4318)"

// otelShutdownTimeout bounds the final export at exit: an unreachable
// collector must not hold the command's exit for long.
const otelShutdownTimeout = 5 * time.Second

// startOTel makes an observer that exports the client's metrics and spans
// over OTLP/HTTP, configured by the standard OTEL_* environment variables
// (endpoint, headers, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, the
// export interval). shutdown flushes what is left; call it before exiting.
// The HTTP exporters keep the binary lean: no gRPC runtime.
func startOTel(ctx context.Context, a *app) (obs observe.Observer, shutdown func() error, err error) {
	// The SDK reports failed background exports here: as the command's
	// warnings, not as log lines of another format.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		fmt.Fprintf(a.stderr, "redlock exec: warning: telemetry: %v\n", err)
	}))
	res := resource.Default() // with OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	metricExp, err := otlpmetrichttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("--otel: metric exporter: %w", err)
	}
	traceExp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("--otel: trace exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metricExp)))
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(traceExp))
	shutdown = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), otelShutdownTimeout)
		defer cancel()
		return errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx))
	}
	o, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp))
	if err != nil {
		_ = shutdown()
		return nil, nil, fmt.Errorf("--otel: %w", err)
	}
	return o, shutdown, nil
}

// observers tells every one of its observers of each event.
type observers []observe.Observer

// Observe implements observe.Observer.
func (os observers) Observe(e observe.Event) {
	for _, o := range os {
		o.Observe(e)
	}
}

// addObserver adds o to the observer already in opts, if any.
func addObserver(opts *redlock.Options, o observe.Observer) {
	if opts.Observer == nil {
		opts.Observer = o
		return
	}
	opts.Observer = observers{opts.Observer, o}
}
