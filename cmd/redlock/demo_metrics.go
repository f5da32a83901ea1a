package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	redlockotel "github.com/quorumlabs/redlock/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"
)

// demoMetrics records the workers' events with the OpenTelemetry observer
// into memory, so that the demo ends with the very metrics a user of
// redlockotel (or of exec --otel) would see in a dashboard.
type demoMetrics struct {
	reader *sdkmetric.ManualReader
	obs    *redlockotel.Observer
}

func newDemoMetrics() (*demoMetrics, error) {
	reader := sdkmetric.NewManualReader()
	// No spans: the demo prints metrics only, and its hot loop need not
	// pay for spans nobody reads.
	obs, err := redlockotel.NewObserver(
		redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		redlockotel.WithTracerProvider(noop.NewTracerProvider()),
	)
	if err != nil {
		return nil, err
	}
	return &demoMetrics{reader: reader, obs: obs}, nil
}

// breakdownKeys are the attributes a metric's points are told apart by in
// the summary, the first one a point has.
var breakdownKeys = []attribute.Key{redlockotel.AttrOutcome, redlockotel.AttrSitOutReason}

// print writes one line per metric: its total (or count and mean for a
// histogram), then the same by outcome or reason.
func (m *demoMetrics) print(w io.Writer) error {
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		return err
	}
	var all []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		all = append(all, sm.Metrics...)
	}
	slices.SortFunc(all, func(a, b metricdata.Metrics) int { return strings.Compare(a.Name, b.Name) })
	fmt.Fprintln(w, "OpenTelemetry metrics of the workers' clients (what redlockotel exports, e.g. with exec --otel):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, metric := range all {
		switch data := metric.Data.(type) {
		case metricdata.Sum[int64]:
			total, by := int64(0), map[string]int64{}
			for _, p := range data.DataPoints {
				total += p.Value
				if k := breakdown(p.Attributes); k != "" {
					by[k] += p.Value
				}
			}
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(by)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, by[k]))
			}
			fmt.Fprintf(tw, "  %s\t%d %s\t%s\n", metric.Name, total, metric.Unit, strings.Join(parts, ", "))
		case metricdata.Histogram[float64]:
			var count uint64
			var sum float64
			by := map[string]metricdata.HistogramDataPoint[float64]{}
			for _, p := range data.DataPoints {
				count, sum = count+p.Count, sum+p.Sum
				k := breakdown(p.Attributes)
				q := by[k]
				q.Count, q.Sum = q.Count+p.Count, q.Sum+p.Sum
				by[k] = q
			}
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(by)) {
				parts = append(parts, fmt.Sprintf("%s %d (mean %s)", k, by[k].Count, meanOf(by[k].Sum, by[k].Count)))
			}
			fmt.Fprintf(tw, "  %s\t%d, mean %s\t%s\n", metric.Name, count, meanOf(sum, count), strings.Join(parts, ", "))
		}
	}
	return tw.Flush()
}

// breakdown gives the value of the first breakdown key in set, or "".
func breakdown(set attribute.Set) string {
	for _, k := range breakdownKeys {
		if v, ok := set.Value(k); ok {
			return v.AsString()
		}
	}
	return ""
}

// meanOf formats sum/count seconds as a duration.
func meanOf(sum float64, count uint64) string {
	if count == 0 {
		return "-"
	}
	return formatDuration(time.Duration(sum / float64(count) * float64(time.Second)))
}
