package redlockotel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/quorumlabs/redlock"
	redlockotel "github.com/quorumlabs/redlock/otel"
	"github.com/quorumlabs/redlock/redistest"
)

func ExampleNewObserver() {
	nodes, err := redistest.Start(3, redistest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer nodes.Stop()
	clients := nodes.Clients()
	reader := sdkmetric.NewManualReader() // in production: a periodic reader with an exporter
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider()

	obs, err := redlockotel.NewObserver(
		redlockotel.WithMeterProvider(mp),  // default otel.GetMeterProvider()
		redlockotel.WithTracerProvider(tp), // default otel.GetTracerProvider()
		// redlockotel.WithLockNameAttribute(), // lock name on the metrics: bounded sets of names only
		// redlockotel.WithAttributes(attribute.String("fleet", "payments")),
	)
	if err != nil {
		log.Fatal(err)
	}
	client, err := redlock.New(clients, redlock.Options{Observer: obs, TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// The nodes are fresh: the first acquire waits out their restart grace (one TTL).
	ctx := context.Background()
	err = client.Do(ctx, "nightly-report", func(ctx context.Context, l *redlock.Lock) error {
		return nil
	}, redlock.WithMaxWait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "redlock.lock.acquisitions" {
				fmt.Println(m.Name, sum.DataPoints[0].Value)
			}
		}
	}
	// Output: redlock.lock.acquisitions 1
}
