package redlockotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
	redlockotel "github.com/quorumlabs/redlock/otel"
	"github.com/quorumlabs/redlock/redistest"
)

// telemetry is an Observer wired to in-memory readers.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	obs    *redlockotel.Observer
}

func newTelemetry(t *testing.T, opts ...redlockotel.Option) *telemetry {
	t.Helper()
	tel := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		_ = tel.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	obs, err := redlockotel.NewObserver(append([]redlockotel.Option{
		redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tel.tp),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	tel.obs = obs
	return tel
}

// metrics collects every metric point so far, by name.
func (tel *telemetry) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	byName := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			byName[m.Name] = m
		}
	}
	return byName
}

// matches tells whether set has every attribute of want.
func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum adds the points of the counter (or up-down counter) name whose
// attributes include want.
func sum(t *testing.T, ms map[string]metricdata.Metrics, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	return total[metricdata.Sum[int64]](t, ms, name, want)
}

// count gives how many values the histogram name recorded with want.
func count(t *testing.T, ms map[string]metricdata.Metrics, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	return total[metricdata.Histogram[float64]](t, ms, name, want)
}

// total adds up, over the points of the metric name whose attributes
// include want, a sum's values or the number of values a histogram
// recorded; the metric must be a D, or be missing (0).
func total[D metricdata.Sum[int64] | metricdata.Histogram[float64]](t *testing.T, ms map[string]metricdata.Metrics, name string, want []attribute.KeyValue) int64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return 0
	}
	data, ok := m.Data.(D)
	if !ok {
		t.Fatalf("%s is a %T, want a %T", name, m.Data, data)
	}
	var n int64
	switch data := any(data).(type) {
	case metricdata.Sum[int64]:
		for _, p := range data.DataPoints {
			if matches(p.Attributes, want) {
				n += p.Value
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range data.DataPoints {
			if matches(p.Attributes, want) {
				n += int64(p.Count)
			}
		}
	}
	return n
}

func outcome(s string) attribute.KeyValue { return redlockotel.AttrOutcome.String(s) }

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	return attributeOf(s.Attributes(), k)
}

// Four locks are acquired, one of them contended three times; one is
// extended, one released, two lost (one's keys deleted behind its holder's
// back, found at its release; one taken over by another owner, found at
// its next extension), then an Acquire gets the lock that was released and
// another gives up waiting: the metrics and spans tell exactly that.
func TestMetricsAndSpansMatchWhatHappened(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	tel := newTelemetry(t)
	c, err := redlock.New(cl.Clients(), redlock.Options{TTL: 10 * time.Second, RestartGrace: redlock.NoRestartGrace, Observer: tel.obs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, parent := tel.tp.Tracer("test").Start(context.Background(), "test")

	names := []string{"job-0", "job-1", "job-2", "job-3"}
	locks := make([]*redlock.Lock, len(names))
	for i, name := range names {
		if locks[i], err = c.TryAcquire(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	const contended = 3
	for range contended {
		if _, err := c.TryAcquire(ctx, "job-0"); !errors.Is(err, redlock.ErrLocked) {
			t.Fatalf("contended acquire: %v, want ErrLocked", err)
		}
	}
	if err := locks[1].Extend(ctx); err != nil {
		t.Fatal(err)
	}
	if err := locks[2].Release(ctx); err != nil {
		t.Fatal(err)
	}
	// job-3's keys vanish behind its holder's back: its release finds it lost.
	// job-1 is taken over by another owner: its next extension finds it lost.
	for _, s := range cl.Servers {
		if err := s.Client().Del(ctx, c.Keys("job-3").Lock).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Client().Set(ctx, c.Keys("job-1").Lock, "another owner", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := locks[3].Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("releasing a lock whose keys were deleted: %v, want ErrLockLost", err)
	}
	if err := locks[1].Extend(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("extending a lock another owner took: %v, want ErrLockLost", err)
	}
	waited, err := c.Acquire(ctx, "job-2")
	if err != nil {
		t.Fatal(err)
	}
	parent.End()

	ms := tel.metrics(t)
	for _, check := range []struct {
		what      string
		got, want int64
	}{
		{"acquisitions", sum(t, ms, redlockotel.MetricAcquisitions), 5},
		{"failures (locked)", sum(t, ms, redlockotel.MetricAcquireFailures, outcome(redlockotel.OutcomeLocked)), contended},
		{"failures (all)", sum(t, ms, redlockotel.MetricAcquireFailures), contended},
		{"extensions (extended)", sum(t, ms, redlockotel.MetricExtensions, outcome(redlockotel.OutcomeExtended)), 1},
		{"extensions (lost)", sum(t, ms, redlockotel.MetricExtensions, outcome(redlockotel.OutcomeLost)), 1},
		{"releases (released)", sum(t, ms, redlockotel.MetricReleases, outcome(redlockotel.OutcomeReleased)), 1},
		{"releases (lost)", sum(t, ms, redlockotel.MetricReleases, outcome(redlockotel.OutcomeLost)), 1},
		{"releases (all)", sum(t, ms, redlockotel.MetricReleases), 2},
		{"losses", sum(t, ms, redlockotel.MetricLosses), 2},
		{"held", sum(t, ms, redlockotel.MetricHeld), 2}, // job-0 and job-2 again
		{"acquire durations (acquired)", count(t, ms, redlockotel.MetricAcquireDuration, outcome(redlockotel.OutcomeAcquired)), 5},
		{"acquire durations (locked)", count(t, ms, redlockotel.MetricAcquireDuration, outcome(redlockotel.OutcomeLocked)), contended},
		{"waits (acquired)", count(t, ms, redlockotel.MetricWaitDuration, outcome(redlockotel.OutcomeAcquired)), 1},
		{"sit-outs", sum(t, ms, redlockotel.MetricSitOuts), 0},
	} {
		if check.got != check.want {
			t.Errorf("%s: %d, want %d", check.what, check.got, check.want)
		}
	}
	if m := ms[redlockotel.MetricAcquireDuration]; m.Unit != "s" {
		t.Errorf("%s unit %q, want s", m.Name, m.Unit)
	}
	if m := ms[redlockotel.MetricHeld]; m.Unit != "{lock}" {
		t.Errorf("%s unit %q, want {lock}", m.Name, m.Unit)
	}
	// The lock's name is not on the metrics unless asked for.
	for _, p := range ms[redlockotel.MetricAcquisitions].Data.(metricdata.Sum[int64]).DataPoints {
		if _, ok := p.Attributes.Value(redlockotel.AttrLockName); ok {
			t.Errorf("acquisitions carry the lock name %v without WithLockNameAttribute", p.Attributes)
		}
	}

	spans := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range tel.spans.Ended() {
		if s.Name() == "test" {
			continue
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %s is not a child of the caller's span", s.Name())
		}
		spans[s.Name()] = append(spans[s.Name()], s)
	}
	if got := len(spans[redlockotel.SpanAcquire]); got != 5+contended {
		t.Errorf("%d acquire spans, want %d", got, 5+contended)
	}
	if got := len(spans[redlockotel.SpanExtend]); got != 2 {
		t.Errorf("%d extend spans, want 2", got)
	}
	if got := len(spans[redlockotel.SpanRelease]); got != 2 {
		t.Errorf("%d release spans, want 2", got)
	}
	outcomes := map[string]int{}
	for _, s := range spans[redlockotel.SpanAcquire] {
		o, _ := attr(s, redlockotel.AttrOutcome)
		outcomes[o.AsString()]++
		nodeOutcome := redlockotel.NodeOK
		switch o.AsString() {
		case redlockotel.OutcomeAcquired:
			if tok, ok := attr(s, redlockotel.AttrFencingToken); !ok || tok.AsInt64() <= 0 {
				t.Errorf("acquired span without a fencing token: %v", s.Attributes())
			}
		case redlockotel.OutcomeLocked:
			nodeOutcome = redlockotel.NodeRefused
			if s.Status().Code == codes.Error {
				t.Errorf("a contended acquire is marked as an error: %v", s.Status())
			}
		}
		// Every node answered before the decision (a quorum of 2 of 3
		// decides; the third answer may come after): 2 or 3 events.
		if n := len(s.Events()); n < 2 || n > 3 {
			t.Errorf("acquire span with %d node events, want 2 or 3", n)
		}
		refused := 0
		for _, ev := range s.Events() {
			v, _ := attributeOf(ev.Attributes, redlockotel.AttrNodeOutcome)
			switch {
			case v.AsString() == nodeOutcome:
				if nodeOutcome == redlockotel.NodeRefused {
					refused++
				}
			case nodeOutcome == redlockotel.NodeRefused && v.AsString() == redlockotel.NodeOK:
				// The holder's acquire decided on two nodes: its call to
				// the third may still be on its way when a contender's
				// reaches it, and the contender wins that one node.
			default:
				t.Errorf("%s span: node event %v, want node outcome %s", o.AsString(), ev.Attributes, nodeOutcome)
			}
			if ev.Time.Before(s.StartTime()) || ev.Time.After(s.EndTime()) {
				t.Errorf("node event at %v outside its span %v..%v", ev.Time, s.StartTime(), s.EndTime())
			}
		}
		if nodeOutcome == redlockotel.NodeRefused && refused < 2 {
			t.Errorf("locked span with %d refusals, want the 2 that lose the round: %v", refused, s.Events())
		}
	}
	if outcomes[redlockotel.OutcomeAcquired] != 5 || outcomes[redlockotel.OutcomeLocked] != contended {
		t.Errorf("acquire span outcomes %v, want 5 acquired, %d locked", outcomes, contended)
	}
	var lostSpans int
	for _, s := range spans[redlockotel.SpanExtend] {
		if o, _ := attr(s, redlockotel.AttrOutcome); o.AsString() == redlockotel.OutcomeLost {
			lostSpans++
			if s.Status().Code != codes.Error {
				t.Errorf("the lost extension's span has status %v, want Error", s.Status())
			}
			if et, _ := attr(s, redlockotel.AttrErrorType); et.AsString() != redlockotel.OutcomeLost {
				t.Errorf("the lost extension's error.type is %q", et.AsString())
			}
		}
	}
	if lostSpans != 1 {
		t.Errorf("%d extend spans say lost, want 1", lostSpans)
	}

	// An Acquire that cannot get the lock gives up at MaxWait.
	if _, err := c.Acquire(context.Background(), "job-0", redlock.WithMaxWait(50*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for a held lock: %v, want a deadline", err)
	}
	ms = tel.metrics(t)
	if got := count(t, ms, redlockotel.MetricWaitDuration, outcome(redlockotel.OutcomeGaveUp)); got != 1 {
		t.Errorf("waits that gave up: %d, want 1", got)
	}
	if err := waited.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sum(t, tel.metrics(t), redlockotel.MetricHeld); got != 1 {
		t.Errorf("held after another release: %d, want 1", got)
	}
}

func attributeOf(kvs []attribute.KeyValue, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// A node restarted without persistence sits out the restart grace: one
// restart and one sit-out for that node, with the reason "restart".
func TestRestartedNodeCountsAsASitOut(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	tel := newTelemetry(t)
	// The restart guard on, with a grace of one short TTL: the fresh nodes
	// vote after it, the restarted one sits it out.
	c, err := redlock.New(cl.Clients(), redlock.Options{TTL: time.Second, Observer: tel.obs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	eventually(t, 15*time.Second, "the fresh nodes vote", func() bool {
		for _, n := range c.Nodes(ctx) {
			if !n.Voting {
				return false
			}
		}
		return true
	})
	if err := cl.Servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the client sees the restart", func() bool {
		return !c.Nodes(ctx)[0].Voting
	})
	ms := tel.metrics(t)
	node := redlockotel.AttrNode.String(cl.Servers[0].Addr)
	if got := sum(t, ms, redlockotel.MetricSitOuts, node, redlockotel.AttrSitOutReason.String("restart")); got != 1 {
		t.Errorf("sit-outs of the restarted node for restart: %d, want 1", got)
	}
	if got := sum(t, ms, redlockotel.MetricSitOuts); got != 1 {
		t.Errorf("sit-outs in all: %d, want 1", got)
	}
	if got := sum(t, ms, redlockotel.MetricRestarts, node); got != 1 {
		t.Errorf("restarts of node 0: %d, want 1", got)
	}
	// The node's vote does not count meanwhile: an acquire's span shows it.
	tel.spans.Reset()
	l, err := c.TryAcquire(ctx, "after-restart")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	var sat int
	for _, s := range tel.spans.Ended() {
		for _, ev := range s.Events() {
			if v, _ := attributeOf(ev.Attributes, redlockotel.AttrNodeOutcome); v.AsString() == redlockotel.NodeSittingOut {
				sat++
			}
		}
	}
	// The decision may come before the sitting-out node's answer.
	if sat > 1 {
		t.Errorf("%d sitting-out node events, want at most 1", sat)
	}
}

// WithLockNameAttribute puts the name on the lock metrics.
func TestLockNameOnMetricsOnlyWhenAsked(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	tel := newTelemetry(t, redlockotel.WithLockNameAttribute(), redlockotel.WithAttributes(attribute.String("fleet", "test")))
	c, err := redlock.New(cl.Clients(), redlock.Options{TTL: 10 * time.Second, RestartGrace: redlock.NoRestartGrace, Observer: tel.obs, AllowNoFaultTolerance: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(context.Background(), "named")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	ms := tel.metrics(t)
	for _, name := range []string{redlockotel.MetricAcquisitions, redlockotel.MetricReleases} {
		if got := sum(t, ms, name, redlockotel.AttrLockName.String("named"), attribute.String("fleet", "test")); got != 1 {
			t.Errorf("%s with the lock name and the fleet: %d, want 1", name, got)
		}
	}
}

func TestOutcomeClassifiesTheLibrarysErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&redlock.LockedError{Name: "x"}, redlockotel.OutcomeLocked},
		{&redlock.QuorumError{Op: "acquire", Name: "x"}, redlockotel.OutcomeNoQuorum},
		{redlock.ErrValidityTooShort, redlockotel.OutcomeValidityTooShort},
		{&redlock.ConfigError{Field: "node", Err: redlock.ErrNotIndependent}, redlockotel.OutcomeNotIndependent},
		{&redlock.ConfigError{Field: "lock name"}, redlockotel.OutcomeInvalidConfig},
		{redlock.ErrLockLost, redlockotel.OutcomeLost},
		{context.Canceled, redlockotel.OutcomeCanceled},
		{errors.New("connection refused"), redlockotel.OutcomeError},
	} {
		if got := redlockotel.Outcome(tc.err); got != tc.want {
			t.Errorf("Outcome(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	for _, tc := range []struct {
		n    observe.NodeResult
		want string
	}{
		{observe.NodeResult{OK: true}, redlockotel.NodeOK},
		{observe.NodeResult{}, redlockotel.NodeRefused},
		{observe.NodeResult{Err: &redlock.NodeError{Node: "a", Err: redlock.ErrNodeSittingOut}}, redlockotel.NodeSittingOut},
		{observe.NodeResult{Err: &redlock.NodeError{Node: "a", Err: redlock.ErrNodeDown}}, redlockotel.NodeDown},
		{observe.NodeResult{Err: &redlock.NodeError{Node: "a", Err: context.DeadlineExceeded}}, redlockotel.NodeTimeout},
		{observe.NodeResult{Err: errors.New("NOSCRIPT")}, redlockotel.NodeError},
	} {
		if got := redlockotel.NodeOutcome(tc.n); got != tc.want {
			t.Errorf("NodeOutcome(%+v) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// eventually polls cond until it holds, and fails the test if it does not
// within the time given.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := redistest.Await(context.Background(), what, within, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatal(err)
	}
}

// A node whose clock jumps while the client uses it sits out: one sit-out
// of that node with the reason "clock-jump", and the next acquire's span
// shows the node sitting out.
func TestClockJumpCountsAsASitOut(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{FakeTime: true})
	tel := newTelemetry(t)
	c, err := redlock.New(cl.Clients(), redlock.Options{TTL: 10 * time.Second, RestartGrace: redlock.NoRestartGrace, Observer: tel.obs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "before-the-jump")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Servers[0].SetClockOffset(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	node := redlockotel.AttrNode.String(cl.Servers[0].Addr)
	jump := redlockotel.AttrSitOutReason.String("clock-jump")
	// Every acquire hears from each node; the jumped node's next answer
	// shows the jump. Bounded: a node seen jumping sits out at once.
	for i := 0; sum(t, tel.metrics(t), redlockotel.MetricSitOuts, node, jump) == 0; i++ {
		if i == 50 {
			t.Fatal("no clock-jump sit-out after 50 acquisitions")
		}
		if l, err := c.TryAcquire(ctx, "after-the-jump"); err == nil {
			_ = l.Release(ctx)
		}
	}
	if got := sum(t, tel.metrics(t), redlockotel.MetricSitOuts); got != 1 {
		t.Errorf("sit-outs in all: %d, want 1 (node 0, clock-jump)", got)
	}
	tel.spans.Reset()
	l, err = c.TryAcquire(ctx, "while-it-sits-out")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, s := range tel.spans.Ended() {
		for _, ev := range s.Events() {
			n, _ := attributeOf(ev.Attributes, redlockotel.AttrNode)
			o, _ := attributeOf(ev.Attributes, redlockotel.AttrNodeOutcome)
			if n.AsString() == cl.Servers[0].Addr && o.AsString() != redlockotel.NodeSittingOut {
				t.Errorf("node 0 while it sits out: node outcome %q, want %s", o.AsString(), redlockotel.NodeSittingOut)
			}
		}
	}
}
