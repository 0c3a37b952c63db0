package runner

import (
	"context"
	"net/http"

	"github.com/redrive/redrive"
)

// setTraceHeaders sends the attempt's W3C Trace Context with an http
// stage's request, so that the called server's spans are children of the
// attempt's: the span in ctx when the engine traces (redrive.Config.TracerProvider),
// else the trace context the item was submitted with. It replaces
// traceparent and tracestate headers of the stage's configuration; with
// neither, it sends none.
func setTraceHeaders(ctx context.Context, h http.Header, it *redrive.Item) {
	tp, ts := redrive.TraceHeaders(ctx)
	if tp == "" {
		tp, ts = it.TraceParent, it.TraceState
	}
	if tp == "" {
		return
	}
	h.Set("Traceparent", tp)
	if ts != "" {
		h.Set("Tracestate", ts)
	} else {
		h.Del("Tracestate")
	}
}
