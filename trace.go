package redrive

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (docs/tracing.md): with Config.TracerProvider set, every attempt
// is a span, a child of the W3C Trace Context its item was submitted with
// (Item.TraceParent), so that one submit's work shows as one trace however
// many processes, attempts and restarts it takes. The span is in the
// handler's context: calls the handler makes join the trace, and the
// runner's http stages send it on as their request's traceparent. An
// external stage's attempt is a span from its lease to its result, and the
// lease carries that span's context to the worker.
//
// Without a TracerProvider the engine has no tracer and skips all of this:
// no span, no context, no allocation per attempt.

// TracerName is the instrumentation scope of the engine's spans.
const TracerName = "github.com/redrive/redrive"

// Attributes of attempt spans.
const (
	// AttrPipeline is the item's pipeline.
	AttrPipeline = attribute.Key("redrive.pipeline")
	// AttrStage is the stage the attempt ran.
	AttrStage = attribute.Key("redrive.stage")
	// AttrAttempt is the attempt's number at its stage, from 1.
	AttrAttempt = attribute.Key("redrive.attempt")
	// AttrItemID is the item's ID.
	AttrItemID = attribute.Key("redrive.item.id")
	// AttrRunID is the item's run's ID.
	AttrRunID = attribute.Key("redrive.run.id")
	// AttrWorker is the worker that ran the attempt: the engine's
	// Config.Owner (host:pid:suffix), or an external worker's name.
	AttrWorker = attribute.Key("redrive.worker")
	// AttrOutcome is the attempt's Outcome (succeeded, retry,
	// rate_limited, dead), or "released" for an attempt that ended without
	// a result (the client stopped, the lease was lost or released).
	AttrOutcome = attribute.Key("redrive.outcome")
	// AttrErrorClass is a failed attempt's class (retryable, final,
	// rate_limited, ...); error.type carries it too.
	AttrErrorClass = attribute.Key("redrive.error.class")
	// AttrErrorType is OpenTelemetry's error.type, the failed attempt's class.
	AttrErrorType = attribute.Key("error.type")
)

// outcomeReleased is AttrOutcome of an attempt that ended without a result.
const outcomeReleased = "released"

// traceContext is the W3C Trace Context propagator: traceparent and
// tracestate.
var traceContext propagation.TraceContext

// itemCarrier reads an item's stored trace context as a propagator's
// carrier, without copying it into a map.
type itemCarrier struct{ tp, ts string }

func (c itemCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.tp
	case "tracestate":
		return c.ts
	}
	return ""
}

func (c itemCarrier) Set(string, string) {}

func (c itemCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// headerPair receives an injected trace context.
type headerPair struct{ tp, ts string }

func (c *headerPair) Get(string) string { return "" }

func (c *headerPair) Set(key, value string) {
	switch key {
	case "traceparent":
		c.tp = value
	case "tracestate":
		c.ts = value
	}
}

func (c *headerPair) Keys() []string { return nil }

// TraceHeaders returns the W3C traceparent and tracestate header values of
// the span context in ctx, or empty strings when ctx carries none (or an
// invalid one).
func TraceHeaders(ctx context.Context) (traceparent, tracestate string) {
	var h headerPair
	traceContext.Inject(ctx, &h)
	return h.tp, h.ts
}

// spanHeaders returns the traceparent and tracestate header values of sc.
func spanHeaders(sc trace.SpanContext) (traceparent, tracestate string) {
	return TraceHeaders(trace.ContextWithSpanContext(context.Background(), sc))
}

// ParseTraceHeaders reads W3C traceparent and tracestate header values and
// returns them as a new, well-formed pair (lowercase, tracestate cleaned of
// malformed members), or empty strings when traceparent is not valid: W3C
// Trace Context tells a receiver to ignore a malformed traceparent.
func ParseTraceHeaders(traceparent, tracestate string) (string, string) {
	if traceparent == "" {
		return "", ""
	}
	ctx := traceContext.Extract(context.Background(), itemCarrier{tp: traceparent, ts: tracestate})
	return TraceHeaders(ctx)
}

// withTraceContext returns items with the trace context of ctx set on those
// that have none of their own: a submit made within a span makes its items'
// attempts children of that span. items is not changed; the result is a
// copy when anything was set.
func withTraceContext(ctx context.Context, items []NewItem) []NewItem {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return items
	}
	tp, ts := TraceHeaders(ctx)
	var out []NewItem
	for i := range items {
		if items[i].TraceParent != "" {
			continue
		}
		if out == nil {
			out = append([]NewItem(nil), items...)
		}
		out[i].TraceParent, out[i].TraceState = tp, ts
	}
	if out == nil {
		return items
	}
	return out
}

// newTracer returns the engine's tracer, nil when tracing is off.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(TracerName)
}

// startAttemptSpan starts the span of an attempt of it by worker, as a
// child of the item's stored trace context, or as a new root when it has
// none (whatever span ctx carries: the engine's contexts descend from
// Start's).
func startAttemptSpan(ctx context.Context, tr trace.Tracer, it *Item, worker string, start time.Time) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(start),
		trace.WithAttributes(
			AttrPipeline.String(it.Pipeline),
			AttrStage.String(it.Stage),
			AttrAttempt.Int(it.Attempt+1),
			AttrItemID.Int64(it.ID),
			AttrRunID.Int64(it.RunID),
			AttrWorker.String(worker),
		),
	}
	parent := trace.SpanContext{}
	if it.TraceParent != "" {
		parent = trace.SpanContextFromContext(traceContext.Extract(context.Background(), itemCarrier{tp: it.TraceParent, ts: it.TraceState}))
	}
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	return tr.Start(ctx, it.Pipeline+"/"+it.Stage, opts...)
}

// endAttemptSpan ends an attempt's span with the attempt's record: its
// outcome and, for a failure, its class and an error status.
func endAttemptSpan(span trace.Span, rec *Attempt, end time.Time) {
	span.SetAttributes(AttrOutcome.String(string(rec.Outcome)))
	if rec.Outcome != OutcomeSucceeded {
		if rec.Class != "" {
			span.SetAttributes(AttrErrorClass.String(rec.Class), AttrErrorType.String(rec.Class))
		}
		span.SetStatus(codes.Error, rec.Error)
	}
	span.End(trace.WithTimestamp(end))
}

// endReleasedSpan ends the span of an attempt that ended without a result,
// saying why.
func endReleasedSpan(span trace.Span, why string) {
	span.SetAttributes(AttrOutcome.String(outcomeReleased))
	span.AddEvent(why)
	span.End()
}
