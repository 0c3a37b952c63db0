package redrive_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
)

// spanAttr returns the value of attribute k of a recorded span.
func spanAttr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// attemptSpans returns the ended spans of the redrive tracer by item ID.
func attemptSpans(t *testing.T, sr *tracetest.SpanRecorder) map[int64][]sdktrace.ReadOnlySpan {
	t.Helper()
	out := map[int64][]sdktrace.ReadOnlySpan{}
	for _, s := range sr.Ended() {
		if s.InstrumentationScope().Name != redrive.TracerName {
			continue
		}
		v, ok := spanAttr(s, redrive.AttrItemID)
		if !ok {
			t.Fatalf("span %q has no item ID", s.Name())
		}
		out[v.AsInt64()] = append(out[v.AsInt64()], s)
	}
	return out
}

// TestTraceAttemptSpans runs a two-stage pipeline whose first stage fails
// once for every item and whose second kills one item: every recorded
// attempt is one span, named pipeline/stage, with the attempt's attributes,
// an error status for the failed ones, the span in the handler's context,
// and as parent the span the run was started in; an item given its own
// traceparent joins that trace instead, and items submitted outside any
// span get a new trace per attempt.
func TestTraceAttemptSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())

	var mu sync.Mutex
	inHandler := map[trace.SpanID]bool{} // the spans the handlers saw
	failedOnce := map[int64]bool{}
	see := func(ctx context.Context) {
		mu.Lock()
		inHandler[trace.SpanContextFromContext(ctx).SpanID()] = true
		mu.Unlock()
	}
	p := redrive.Pipeline{Name: "p", Stages: []redrive.Stage{
		{Name: "a", Policy: fast(3), Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			see(ctx)
			mu.Lock()
			first := !failedOnce[it.ID]
			failedOnce[it.ID] = true
			mu.Unlock()
			if first {
				return nil, retry.Retryable(errors.New("warming up"))
			}
			return it.Payload, nil
		}},
		{Name: "b", Policy: fast(3), Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			see(ctx)
			if strings.Contains(string(it.Payload), "doomed") {
				return nil, retry.Final(errors.New("doomed item"))
			}
			return it.Payload, nil
		}},
	}}
	s := openStore(t)
	cfg := testConfig(nil)
	cfg.TracerProvider = tp
	cfg.Owner = "test-owner"
	c := startClient(t, s, cfg, p)

	ctx, submit := tp.Tracer("submitter").Start(context.Background(), "submit")
	const ownParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	run, err := c.StartRun(ctx, "p", []redrive.NewItem{
		{Payload: []byte(`"fine"`)},
		{Payload: []byte(`"doomed"`)},
		{Payload: []byte(`"own"`), TraceParent: ownParent, TraceState: "vendor=1"},
	}, redrive.RunOptions{})
	submit.End()
	if err != nil {
		t.Fatal(err)
	}
	run = wait(t, c, run)
	loose, err := c.StartRun(context.Background(), "p", []redrive.NewItem{{Payload: []byte(`"loose"`)}}, redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, c, loose)
	// Spans end before the completion is written, so the run's end is
	// after every span's.
	spans := attemptSpans(t, sr)

	items, err := s.ListItems(context.Background(), redrive.ItemFilter{Limit: 10})
	if err != nil || len(items) != 4 {
		t.Fatalf("items = %d, %v", len(items), err)
	}
	own := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": ownParent}))
	for _, it := range items {
		as, err := s.Attempts(context.Background(), it.ID)
		if err != nil {
			t.Fatal(err)
		}
		got := spans[it.ID]
		if len(got) != len(as) {
			t.Fatalf("item %d (%s): %d spans for %d attempts", it.ID, it.Payload, len(got), len(as))
		}
		traces := map[trace.TraceID]bool{}
		for i, sp := range got {
			a := as[i]
			if want := "p/" + a.Stage; sp.Name() != want {
				t.Errorf("span %q, want %q", sp.Name(), want)
			}
			if sp.SpanKind() != trace.SpanKindConsumer {
				t.Errorf("span kind %v, want consumer", sp.SpanKind())
			}
			for k, want := range map[attribute.Key]attribute.Value{
				redrive.AttrPipeline: attribute.StringValue("p"),
				redrive.AttrStage:    attribute.StringValue(a.Stage),
				redrive.AttrAttempt:  attribute.IntValue(a.Number),
				redrive.AttrItemID:   attribute.Int64Value(it.ID),
				redrive.AttrRunID:    attribute.Int64Value(it.RunID),
				redrive.AttrWorker:   attribute.StringValue("test-owner"),
				redrive.AttrOutcome:  attribute.StringValue(string(a.Outcome)),
			} {
				if v, ok := spanAttr(sp, k); !ok || v != want {
					t.Errorf("item %d attempt %d: %s = %v, want %v", it.ID, a.Number, k, v.String(), want.String())
				}
			}
			if a.Outcome == redrive.OutcomeSucceeded {
				if sp.Status().Code != codes.Unset {
					t.Errorf("item %d attempt %d succeeded, span status %v", it.ID, a.Number, sp.Status())
				}
				if _, ok := spanAttr(sp, redrive.AttrErrorClass); ok {
					t.Errorf("succeeded attempt's span has an error class")
				}
			} else {
				if sp.Status().Code != codes.Error || sp.Status().Description != a.Error {
					t.Errorf("item %d attempt %d failed (%s), span status %+v", it.ID, a.Number, a.Error, sp.Status())
				}
				if v, _ := spanAttr(sp, redrive.AttrErrorClass); v.AsString() != a.Class || a.Class == "" {
					t.Errorf("item %d attempt %d: error class %q, want %q", it.ID, a.Number, v.AsString(), a.Class)
				}
			}
			mu.Lock()
			seen := inHandler[sp.SpanContext().SpanID()]
			mu.Unlock()
			if !seen {
				t.Errorf("item %d attempt %d: the handler's context did not hold the attempt's span", it.ID, a.Number)
			}
			traces[sp.SpanContext().TraceID()] = true
			switch string(it.Payload) {
			case `"fine"`, `"doomed"`:
				if sp.Parent().SpanID() != submit.SpanContext().SpanID() || sp.SpanContext().TraceID() != submit.SpanContext().TraceID() {
					t.Errorf("item %d: span parent %v, want the submit span %v", it.ID, sp.Parent(), submit.SpanContext())
				}
				if !sp.Parent().IsRemote() {
					t.Errorf("item %d: the parent should come from the stored trace context (remote)", it.ID)
				}
			case `"own"`:
				if sp.Parent().SpanID() != own.SpanID() || sp.SpanContext().TraceID() != own.TraceID() {
					t.Errorf("item %d: span parent %v, want its own traceparent %v", it.ID, sp.Parent(), own)
				}
				if sp.SpanContext().TraceState().Get("vendor") != "1" {
					t.Errorf("item %d: tracestate %q, want vendor=1 carried", it.ID, sp.SpanContext().TraceState())
				}
			case `"loose"`:
				if sp.Parent().IsValid() {
					t.Errorf("item %d submitted outside a span: span has parent %v", it.ID, sp.Parent())
				}
			}
		}
		if string(it.Payload) == `"loose"` && len(traces) != len(got) {
			t.Errorf("item without a trace context: %d attempts in %d traces, want one each", len(got), len(traces))
		}
	}
	if run.Counts.Succeeded != 2 || run.Counts.Dead != 1 {
		t.Errorf("run counts %+v, want 2 succeeded and 1 dead", run.Counts)
	}
}

// TestTraceOffByDefault shows that without a TracerProvider no span is
// started: the handler's context has none, even when the run was started
// inside one, and the item still keeps the submitter's trace context.
func TestTraceOffByDefault(t *testing.T) {
	var mu sync.Mutex
	var got []trace.SpanContext
	p := redrive.Pipeline{Name: "p", Stages: []redrive.Stage{{Name: "a", Policy: fast(1),
		Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			mu.Lock()
			got = append(got, trace.SpanContextFromContext(ctx))
			mu.Unlock()
			return nil, nil
		}}}}
	s := openStore(t)
	c := startClient(t, s, testConfig(nil), p)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	ctx, span := tp.Tracer("submitter").Start(context.Background(), "submit")
	run, err := c.StartRun(ctx, "p", items(3), redrive.RunOptions{})
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	wait(t, c, run)
	if len(got) != 3 {
		t.Fatalf("%d attempts, want 3", len(got))
	}
	for _, sc := range got {
		if sc.IsValid() {
			t.Errorf("tracing off, the handler's context holds span %v", sc)
		}
	}
	if n := len(sr.Ended()); n != 1 {
		t.Errorf("%d spans ended, want only the submitter's", n)
	}
	its, err := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID})
	if err != nil {
		t.Fatal(err)
	}
	wantTP, _ := redrive.TraceHeaders(ctx)
	for _, it := range its {
		if it.TraceParent != wantTP || wantTP == "" {
			t.Errorf("item %d traceparent %q, want the submitter's %q", it.ID, it.TraceParent, wantTP)
		}
	}
}

// TestTraceExternalLeases shows that an external worker's lease carries
// the attempt span's context, that the span ends with the worker's result
// (an error status for a failure), and that a released lease's span ends
// as released; without tracing, the lease carries the item's own trace
// context.
func TestTraceExternalLeases(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	s := openStore(t)
	cfg := testConfig(nil)
	cfg.TracerProvider = tp
	c := startClient(t, s, cfg, extPipeline("p", redrive.Stage{}))
	ctx, submit := tp.Tracer("submitter").Start(context.Background(), "submit")
	run, err := c.StartRun(ctx, "p", items(3), redrive.RunOptions{})
	submit.End()
	if err != nil {
		t.Fatal(err)
	}
	var ls []redrive.ExternalLease
	deadline := time.Now().Add(30 * time.Second)
	for len(ls) < 3 && time.Now().Before(deadline) {
		ls = append(ls, lease(t, c, redrive.ExternalLeaseRequest{Worker: "py-1", Max: 3, Wait: time.Second})...)
	}
	if len(ls) != 3 {
		t.Fatalf("leased %d, want 3", len(ls))
	}
	prop := propagation.TraceContext{}
	leaseSpan := map[int64]trace.SpanContext{}
	for _, l := range ls {
		sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": l.TraceParent}))
		if !sc.IsValid() || sc.TraceID() != submit.SpanContext().TraceID() || sc.SpanID() == submit.SpanContext().SpanID() {
			t.Fatalf("lease of item %d: traceparent %q, want a span of the submit's trace %v", l.Item.ID, l.TraceParent, submit.SpanContext().TraceID())
		}
		leaseSpan[l.Item.ID] = sc
	}
	settle(t, c, ok(ls[0], `"done"`), failed(ls[1], retry.ClassFinal, "worker says no", 0))
	if err := c.ReleaseExternal(context.Background(), "py-1", []redrive.LeaseRef{ls[2].Ref()}); err != nil {
		t.Fatal(err)
	}
	byItem := map[int64]sdktrace.ReadOnlySpan{}
	for id, sp := range attemptSpans(t, sr) {
		for _, x := range sp {
			if v, _ := spanAttr(x, redrive.AttrStage); v.AsString() == "ext" {
				byItem[id] = x
			}
		}
	}
	for i, l := range ls {
		sp := byItem[l.Item.ID]
		if sp == nil {
			t.Fatalf("no ended span of the external attempt of item %d", l.Item.ID)
		}
		if sp.SpanContext().SpanID() != leaseSpan[l.Item.ID].SpanID() {
			t.Errorf("item %d: lease carried span %v, the ended span is %v", l.Item.ID, leaseSpan[l.Item.ID].SpanID(), sp.SpanContext().SpanID())
		}
		if sp.Parent().SpanID() != submit.SpanContext().SpanID() {
			t.Errorf("item %d: external span's parent %v, want the submit span", l.Item.ID, sp.Parent().SpanID())
		}
		if v, _ := spanAttr(sp, redrive.AttrWorker); v.AsString() != "py-1" {
			t.Errorf("item %d: worker %q, want py-1", l.Item.ID, v.AsString())
		}
		outcome, _ := spanAttr(sp, redrive.AttrOutcome)
		switch i {
		case 0:
			if outcome.AsString() != "succeeded" || sp.Status().Code != codes.Unset {
				t.Errorf("settled ok: outcome %q, status %v", outcome.AsString(), sp.Status())
			}
		case 1:
			cl, _ := spanAttr(sp, redrive.AttrErrorClass)
			if outcome.AsString() != "dead" || sp.Status().Code != codes.Error || sp.Status().Description != "worker says no" || cl.AsString() != "final" {
				t.Errorf("settled final: outcome %q, class %q, status %v", outcome.AsString(), cl.AsString(), sp.Status())
			}
		case 2:
			if outcome.AsString() != "released" || sp.Status().Code != codes.Unset {
				t.Errorf("released: outcome %q, status %v", outcome.AsString(), sp.Status())
			}
		}
	}
	_ = run

	// Without tracing, the lease hands on the item's own trace context.
	s2 := openStore(t)
	c2 := startClient(t, s2, testConfig(nil), extPipeline("p", redrive.Stage{}))
	const tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if _, err := c2.StartRun(context.Background(), "p", []redrive.NewItem{{Payload: []byte(`1`), TraceParent: tp2, TraceState: "k=v"}}, redrive.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	var l2 []redrive.ExternalLease
	for len(l2) == 0 && time.Now().Before(deadline) {
		l2 = lease(t, c2, redrive.ExternalLeaseRequest{Wait: time.Second})
	}
	if len(l2) != 1 || l2[0].TraceParent != tp2 || l2[0].TraceState != "k=v" {
		t.Fatalf("untraced lease %+v: want the item's traceparent %q and tracestate k=v", l2, tp2)
	}
}

// TestParseTraceHeaders checks the normalisation of submitted headers.
func TestParseTraceHeaders(t *testing.T) {
	for _, tc := range []struct{ tp, ts, wantTP, wantTS string }{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=1", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=1"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "a=1", "", ""}, // zero trace ID
		{"garbage", "a=1", "", ""},
		{"", "a=1", "", ""},
	} {
		tp, ts := redrive.ParseTraceHeaders(tc.tp, tc.ts)
		if tp != tc.wantTP || ts != tc.wantTS {
			t.Errorf("ParseTraceHeaders(%q, %q) = %q, %q; want %q, %q", tc.tp, tc.ts, tp, ts, tc.wantTP, tc.wantTS)
		}
	}
}
