package redlockotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	redlockotel "github.com/quorumlabs/redlock/otel"
	"github.com/quorumlabs/redlock/redistest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkAcquireRelease is the root module's hot-path benchmark on 5
// nodes, without an observer and with the OTel one (metrics into a manual
// reader, every span sampled and ended, none exported): what the
// instrumentation costs per lock.
func BenchmarkAcquireRelease(b *testing.B) {
	cl := redistest.StartT(b, 5, redistest.Options{})
	for _, observed := range []bool{false, true} {
		name := "observer=none"
		opts := redlock.Options{TTL: 10 * time.Second, RestartGrace: redlock.NoRestartGrace}
		if observed {
			name = "observer=otel"
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			tp := sdktrace.NewTracerProvider()
			obs, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp))
			if err != nil {
				b.Fatal(err)
			}
			opts.Observer = obs
		}
		b.Run(name, func(b *testing.B) {
			c, err := redlock.New(cl.Clients(), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.Acquire(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
