package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	redlockotel "github.com/quorumlabs/redlock/otel"
	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpSink is an OTLP/HTTP endpoint on 127.0.0.1 that keeps the metric and
// span names it receives.
type otlpSink struct {
	mu      sync.Mutex
	metrics map[string]bool
	spans   map[string]bool
	errs    []error
}

func startOTLPSink(t *testing.T) (*otlpSink, string) {
	t.Helper()
	sink := &otlpSink{metrics: map[string]bool{}, spans: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/metrics", receive(sink, func(req *collmetrics.ExportMetricsServiceRequest) {
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					sink.metrics[m.Name] = true
				}
			}
		}
	}))
	mux.HandleFunc("POST /v1/traces", receive(sink, func(req *colltrace.ExportTraceServiceRequest) {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					sink.spans[s.Name] = true
				}
			}
		}
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sink, "http://" + ln.Addr().String()
}

// receive handles the OTLP requests of type M: each one decoded, then
// kept by keep under the sink's lock.
func receive[M any, PM interface {
	*M
	proto.Message
}](s *otlpSink, keep func(PM)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req := PM(new(M))
		if !s.decode(w, r, req) {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		keep(req)
	}
}

// decode reads an OTLP protobuf request into msg and answers it.
func (s *otlpSink) decode(w http.ResponseWriter, r *http.Request, msg proto.Message) bool {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = proto.Unmarshal(body, msg)
	}
	if err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	return true
}

// exec --otel exports the lock's metrics and spans to the OTLP endpoint of
// OTEL_EXPORTER_OTLP_ENDPOINT before it exits.
func TestExecOTelExportsToTheOTLPEndpoint(t *testing.T) {
	sink, endpoint := startOTLPSink(t)
	name := lockName(t)
	r := cli{
		args: []string{"exec", "--otel", ttlFlag, name, "--", "true"},
		env:  []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_SERVICE_NAME=redlock-test"},
	}.run(t)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("want exit 0 and a quiet stderr, got %v", r)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.errs) > 0 {
		t.Fatalf("the endpoint could not read what it got: %v", sink.errs)
	}
	for _, m := range []string{redlockotel.MetricAcquisitions, redlockotel.MetricAcquireDuration, redlockotel.MetricReleases, redlockotel.MetricHeld} {
		if !sink.metrics[m] {
			t.Errorf("metric %s not received; got %v", m, sink.metrics)
		}
	}
	for _, s := range []string{redlockotel.SpanAcquire, redlockotel.SpanRelease} {
		if !sink.spans[s] {
			t.Errorf("span %s not received; got %v", s, sink.spans)
		}
	}
	requireReleased(t, libClient(t), name)
}

// An unreachable endpoint costs a warning at exit, never the command's
// exit code.
func TestExecOTelWithNoCollectorStillRunsTheCommand(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	name := lockName(t)
	r := cli{
		args: []string{"exec", "--otel", ttlFlag, name, "--", "sh", "-c", "exit 3"},
		env:  []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + closed, "OTEL_EXPORTER_OTLP_TIMEOUT=1000"},
	}.run(t)
	if r.code != 3 {
		t.Fatalf("want the command's exit 3, got %v", r)
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if !strings.HasPrefix(line, "redlock exec: warning: telemetry: ") {
			t.Errorf("stderr line %q is not a telemetry warning; stderr:\n%s", line, r.stderr)
		}
	}
	if !strings.Contains(r.stderr, "/v1/metrics") {
		t.Errorf("no warning that the metrics could not be exported; stderr:\n%s", r.stderr)
	}
	requireReleased(t, libClient(t), name)
}
