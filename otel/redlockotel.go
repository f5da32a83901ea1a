// Package redlockotel turns the events of a redlock.Client into
// OpenTelemetry metrics and spans. It follows the conventions of go-redis'
// own instrumentation (redisotel): one constructor, providers given as
// options and defaulting to the global ones, dotted names under one
// namespace ("redlock."), units in UCUM ("s", "{lock}").
//
//	obs, err := redlockotel.NewObserver(
//		redlockotel.WithMeterProvider(mp),
//		redlockotel.WithTracerProvider(tp),
//	)
//	client, err := redlock.New(clients, redlock.Options{Observer: obs})
//
// Metric attributes are bounded in cardinality: an outcome or reason from a
// fixed list and the node's address; the lock's name only with
// WithLockNameAttribute. Spans always carry the lock's name.
package redlockotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/quorumlabs/redlock/otel"

// The attribute keys.
const (
	AttrLockName      = attribute.Key("redlock.lock.name")      // only with WithLockNameAttribute on metrics
	AttrOutcome       = attribute.Key("redlock.outcome")        // see the Outcome constants
	AttrNode          = attribute.Key("redlock.node")           // a node's address
	AttrNodeOutcome   = attribute.Key("redlock.node.outcome")   // see the Node outcome constants
	AttrNodeLatency   = attribute.Key("redlock.node.latency")   // seconds from the round's start to the node's answer
	AttrNodeError     = attribute.Key("redlock.node.error")     // the node's error message
	AttrSitOutReason  = attribute.Key("redlock.sit_out.reason") // Event.Reason: "clock-jump", "clock-skew", "restart"
	AttrFencingToken  = attribute.Key("redlock.fencing_token")  // the lock's fencing token
	AttrValidity      = attribute.Key("redlock.validity")       // seconds of validity the operation gave
	AttrNodesOK       = attribute.Key("redlock.nodes.ok")       // nodes that said yes before the decision
	AttrErrorType     = attribute.Key("error.type")             // the outcome of a failed operation, as in the OTel semantic conventions
	nodeEventName     = "redlock.node"
	instrumentVersion = "0.1.0"
)

// The outcomes (AttrOutcome) of operations. Everything not in this list is
// OutcomeError.
const (
	OutcomeAcquired         = "acquired"
	OutcomeExtended         = "extended"
	OutcomeReleased         = "released"
	OutcomeLocked           = "locked"             // another owner holds the lock
	OutcomeNoQuorum         = "no_quorum"          // too many nodes failed or sat out
	OutcomeValidityTooShort = "validity_too_short" // the round took the whole TTL
	OutcomeNotIndependent   = "not_independent"    // a node is a replica or a duplicate
	OutcomeLost             = "lost"               // the lock was no longer ours
	OutcomeNotHeld          = "not_held"           // already released
	OutcomeGaveUp           = "gave_up"            // an Acquire's wait ended (context or MaxWait)
	OutcomeCanceled         = "canceled"           // the caller's context was cancelled
	OutcomeInvalidConfig    = "invalid_config"     // a bad lock name, option or closed client
	OutcomeError            = "error"
)

// The outcomes of one node in a round (AttrNodeOutcome).
const (
	NodeOK         = "ok"          // it said yes
	NodeRefused    = "refused"     // it answered no: another owner, or our key gone
	NodeSittingOut = "sitting_out" // its vote did not count (restart grace, clock)
	NodeDown       = "down"        // it failed a moment ago and was not asked
	NodeTimeout    = "timeout"     // no answer within the node timeout
	NodeError      = "error"       // any other failure
)

// Option configures NewObserver.
type Option func(*config)

type config struct {
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	attrs    []attribute.KeyValue
	lockName bool
}

// WithTracerProvider sets the tracer provider; the global one by default.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets the meter provider; the global one by default.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithAttributes adds attributes to every metric point and span, such as
// the name of the fleet of nodes.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// WithLockNameAttribute puts the lock's name on the lock metrics. Only for a
// bounded set of names: every name makes a time series of its own.
func WithLockNameAttribute() Option {
	return func(c *config) { c.lockName = true }
}

// Observer is a observe.Observer that records metrics and spans. Its
// Observe is safe for concurrent use and does not block.
type Observer struct {
	cfg    config
	tracer trace.Tracer
	// byOutcome holds the lock metrics' attributes for every outcome, made
	// once, when the lock's name is not among them. Read-only.
	byOutcome map[string]metric.MeasurementOption

	acquireDuration metric.Float64Histogram
	acquisitions    metric.Int64Counter
	acquireFailures metric.Int64Counter
	extensions      metric.Int64Counter
	releases        metric.Int64Counter
	losses          metric.Int64Counter
	held            metric.Int64UpDownCounter
	waitDuration    metric.Float64Histogram
	sitOuts         metric.Int64Counter
	restarts        metric.Int64Counter
}

// The metric names.
const (
	MetricAcquireDuration = "redlock.lock.acquire.duration"
	MetricAcquisitions    = "redlock.lock.acquisitions"
	MetricAcquireFailures = "redlock.lock.acquire.failures"
	MetricExtensions      = "redlock.lock.extensions"
	MetricReleases        = "redlock.lock.releases"
	MetricLosses          = "redlock.lock.losses"
	MetricHeld            = "redlock.lock.held"
	MetricWaitDuration    = "redlock.lock.wait.duration"
	MetricSitOuts         = "redlock.node.sit_outs"
	MetricRestarts        = "redlock.node.restarts"
)

// The span names.
const (
	SpanAcquire = "redlock.acquire"
	SpanExtend  = "redlock.extend"
	SpanRelease = "redlock.release"
)

// durationBuckets suit a lock's round trips: from a local node's 100µs to
// a wait of tens of seconds.
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// NewObserver makes an Observer from the providers in opts. It fails only
// if the meter provider refuses an instrument.
func NewObserver(opts ...Option) (*Observer, error) {
	o := &Observer{}
	for _, opt := range opts {
		opt(&o.cfg)
	}
	if o.cfg.tp == nil {
		o.cfg.tp = otel.GetTracerProvider()
	}
	if o.cfg.mp == nil {
		o.cfg.mp = otel.GetMeterProvider()
	}
	o.tracer = o.cfg.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(instrumentVersion))
	m := o.cfg.mp.Meter(ScopeName, metric.WithInstrumentationVersion(instrumentVersion))

	var errs []error
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	o.acquireDuration = hist(MetricAcquireDuration, "Duration of one acquire round on the nodes, by outcome.")
	o.acquisitions = counter(MetricAcquisitions, "{lock}", "Locks acquired.")
	o.acquireFailures = counter(MetricAcquireFailures, "{attempt}", "Acquire rounds that failed, by reason.")
	o.extensions = counter(MetricExtensions, "{extension}", "Extensions, by outcome.")
	o.releases = counter(MetricReleases, "{lock}", "Releases, by outcome.")
	o.losses = counter(MetricLosses, "{lock}", "Held locks that were lost: their validity ended or another owner took them.")
	o.waitDuration = hist(MetricWaitDuration, "Time an Acquire call waited, from the call to the lock or to giving up, by outcome.")
	o.sitOuts = counter(MetricSitOuts, "{sit_out}", "Times a node's vote stopped counting, by reason.")
	o.restarts = counter(MetricRestarts, "{restart}", "Node restarts seen (a new run_id).")
	var err error
	o.held, err = m.Int64UpDownCounter(MetricHeld, metric.WithUnit("{lock}"), metric.WithDescription("Locks held now by this process."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if !o.cfg.lockName {
		o.byOutcome = map[string]metric.MeasurementOption{}
		for _, outcome := range []string{"", OutcomeAcquired, OutcomeExtended, OutcomeReleased, OutcomeLocked,
			OutcomeNoQuorum, OutcomeValidityTooShort, OutcomeNotIndependent, OutcomeLost, OutcomeNotHeld,
			OutcomeGaveUp, OutcomeCanceled, OutcomeInvalidConfig, OutcomeError} {
			o.byOutcome[outcome] = o.lockAttrs("", outcome)
		}
	}
	return o, nil
}

// Observe records e.
func (o *Observer) Observe(e observe.Event) {
	ctx := e.Context
	if ctx == nil {
		ctx = context.Background()
	}
	switch e.Kind {
	case observe.Acquired:
		attrs := o.lockAttrs(e.Name, OutcomeAcquired)
		o.acquireDuration.Record(ctx, e.Elapsed.Seconds(), attrs)
		o.acquisitions.Add(ctx, 1, o.lockAttrs(e.Name, ""))
		o.held.Add(ctx, 1, o.lockAttrs(e.Name, ""))
		o.span(ctx, SpanAcquire, e, OutcomeAcquired)
	case observe.AcquireFailed:
		outcome := Outcome(e.Err)
		o.acquireDuration.Record(ctx, e.Elapsed.Seconds(), o.lockAttrs(e.Name, outcome))
		o.acquireFailures.Add(ctx, 1, o.lockAttrs(e.Name, outcome))
		o.span(ctx, SpanAcquire, e, outcome)
	case observe.Extended:
		o.extensions.Add(ctx, 1, o.lockAttrs(e.Name, OutcomeExtended))
		o.spanIfCalled(ctx, SpanExtend, e, OutcomeExtended)
	case observe.ExtendFailed:
		outcome := Outcome(e.Err)
		o.extensions.Add(ctx, 1, o.lockAttrs(e.Name, outcome))
		o.spanIfCalled(ctx, SpanExtend, e, outcome)
	case observe.Released:
		outcome := OutcomeReleased
		if e.Err != nil {
			outcome = Outcome(e.Err)
		}
		o.releases.Add(ctx, 1, o.lockAttrs(e.Name, outcome))
		// A lost lock left the gauge at its observe.Lost.
		if !errors.Is(e.Err, redlock.ErrLockLost) {
			o.held.Add(ctx, -1, o.lockAttrs(e.Name, ""))
		}
		o.span(ctx, SpanRelease, e, outcome)
	case observe.Lost:
		o.losses.Add(ctx, 1, o.lockAttrs(e.Name, ""))
		o.held.Add(ctx, -1, o.lockAttrs(e.Name, ""))
	case observe.Waited:
		outcome := OutcomeAcquired
		if e.Err != nil {
			outcome = waitOutcome(e.Err)
		}
		o.waitDuration.Record(ctx, e.Elapsed.Seconds(), o.lockAttrs(e.Name, outcome))
	case observe.NodeSitOut:
		o.sitOuts.Add(ctx, 1, o.attrs(AttrNode.String(e.Node), AttrSitOutReason.String(e.Reason)))
	case observe.NodeRestarted:
		o.restarts.Add(ctx, 1, o.attrs(AttrNode.String(e.Node)))
	}
}

// attrs is the option with the user's attributes and kv.
func (o *Observer) attrs(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append(kv, o.cfg.attrs...)...)
}

// lockAttrs are the attributes of a lock metric: the outcome if not empty,
// and the name if asked for.
func (o *Observer) lockAttrs(name, outcome string) metric.MeasurementOption {
	if opt, ok := o.byOutcome[outcome]; ok {
		return opt
	}
	kv := make([]attribute.KeyValue, 0, 2+len(o.cfg.attrs))
	if outcome != "" {
		kv = append(kv, AttrOutcome.String(outcome))
	}
	if o.cfg.lockName {
		kv = append(kv, AttrLockName.String(name))
	}
	return metric.WithAttributes(append(kv, o.cfg.attrs...)...)
}

// spanIfCalled records a span for an operation a caller asked for: the
// renewal scheduler's extensions, which no call caused (no Context), would
// each be a trace of their own, every third of a TTL for every lock.
func (o *Observer) spanIfCalled(ctx context.Context, name string, e observe.Event, outcome string) {
	if e.Context != nil {
		o.span(ctx, name, e, outcome)
	}
}

// span records the operation e ended, after the fact: it started e.Elapsed
// ago. Every node's result is an event at the moment its answer came. An
// operation outside any trace gets a root span, as a go-redis command does
// under redisotel.
func (o *Observer) span(ctx context.Context, name string, e observe.Event, outcome string) {
	end := time.Now()
	start := end.Add(-e.Elapsed)
	_, span := o.tracer.Start(ctx, name, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal))
	if !span.IsRecording() {
		span.End(trace.WithTimestamp(end))
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6+len(o.cfg.attrs))
	attrs = append(attrs, AttrLockName.String(e.Name), AttrOutcome.String(outcome))
	if e.Token != 0 {
		attrs = append(attrs, AttrFencingToken.Int64(e.Token))
	}
	if e.Validity > 0 {
		attrs = append(attrs, AttrValidity.Float64(e.Validity.Seconds()))
	}
	ok := 0
	for _, n := range e.Nodes {
		if n.OK {
			ok++
		}
		ev := []attribute.KeyValue{AttrNode.String(n.Node), AttrNodeOutcome.String(NodeOutcome(n)), AttrNodeLatency.Float64(n.Elapsed.Seconds())}
		if n.Err != nil {
			ev = append(ev, AttrNodeError.String(n.Err.Error()))
		}
		span.AddEvent(nodeEventName, trace.WithTimestamp(start.Add(n.Elapsed)), trace.WithAttributes(ev...))
	}
	if e.Nodes != nil {
		attrs = append(attrs, AttrNodesOK.Int(ok))
	}
	// A lock held by another owner is an answer, not a failure (as
	// redisotel treats redis.Nil): no error status.
	if e.Err != nil && outcome != OutcomeLocked {
		attrs = append(attrs, AttrErrorType.String(outcome))
		span.RecordError(e.Err, trace.WithTimestamp(end))
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.SetAttributes(append(attrs, o.cfg.attrs...)...)
	span.End(trace.WithTimestamp(end))
}

// Outcome classifies an operation's error into one of the Outcome
// constants: what the metrics and spans carry instead of the message.
func Outcome(err error) string {
	if err == nil {
		return ""
	}
	for _, o := range outcomes {
		if errors.Is(err, o.err) {
			return o.outcome
		}
	}
	return OutcomeError
}

// outcomes are the errors Outcome tells apart, in the order it asks: the
// first one err is decides.
var outcomes = []struct {
	err     error
	outcome string
}{
	{redlock.ErrLockLost, OutcomeLost},
	{redlock.ErrNotIndependent, OutcomeNotIndependent},
	{redlock.ErrInvalidConfig, OutcomeInvalidConfig},
	{redlock.ErrLocked, OutcomeLocked},
	{redlock.ErrNoQuorum, OutcomeNoQuorum},
	{redlock.ErrValidityTooShort, OutcomeValidityTooShort},
	{redlock.ErrNotHeld, OutcomeNotHeld},
	{context.Canceled, OutcomeCanceled},
	{context.DeadlineExceeded, OutcomeCanceled},
}

// waitOutcome classifies why an Acquire call stopped waiting without the
// lock: its context ended (or MaxWait passed), or an error that no retry
// could cure.
func waitOutcome(err error) string {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return OutcomeGaveUp
	}
	return Outcome(err)
}

// NodeOutcome classifies one node's result in a round into one of the Node
// outcome constants.
func NodeOutcome(n observe.NodeResult) string {
	switch {
	case n.OK:
		return NodeOK
	case n.Err == nil:
		return NodeRefused
	case errors.Is(n.Err, redlock.ErrNodeSittingOut):
		return NodeSittingOut
	case errors.Is(n.Err, redlock.ErrNodeDown):
		return NodeDown
	case errors.Is(n.Err, context.DeadlineExceeded):
		return NodeTimeout
	}
	return NodeError
}
