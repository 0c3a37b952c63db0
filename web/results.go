package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/jsonappend"
)

// This file serves results in bulk: items with their bytes in one JSON
// encoding, the NDJSON export of a run's items, and the wait for a run's
// end.

// itemView is an item as the API shows it: redrive.Item's JSON, whose
// payload and input are JSON values with their encoding beside them
// (redrive.EncodeBytes), and, for a succeeded item when asked, its output
// in the same encoding.
type itemView struct {
	item redrive.Item
	// output is a succeeded item's result, its last stage's output.
	output         json.RawMessage
	outputEncoding string
}

// appendJSON appends the item's object, with "output" and
// "output_encoding" added when there is an output, as the JSON encoder
// would write it, without the encoder's second pass over every item.
func (v itemView) appendJSON(b []byte) ([]byte, error) {
	b, err := v.item.AppendJSON(b)
	if err != nil || v.output == nil {
		return b, err
	}
	b = append(b[:len(b)-1], `,"output":`...) // b ends with the object's '}'
	b = jsonappend.Raw(b, v.output)
	b = append(b, `,"output_encoding":`...)
	b = jsonappend.String(b, v.outputEncoding)
	return append(b, '}'), nil
}

// includes are the optional parts of an item in a list.
type includes struct{ output, payload, input bool }

// includeParam reads include=output,payload,input.
func (q *query) includes(allowed ...string) includes {
	var inc includes
	for _, v := range q.v["include"] {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			ok := false
			for _, a := range allowed {
				ok = ok || p == a
			}
			if !ok {
				q.fail(badField("include", "unknown part %q (allowed: %s)", p, strings.Join(allowed, ", ")))
				continue
			}
			switch p {
			case "output":
				inc.output = true
			case "payload":
				inc.payload = true
			case "input":
				inc.input = true
			}
		}
	}
	return inc
}

// viewItem shows it with the parts inc asks for. Output is shown for
// succeeded items only.
func viewItem(it redrive.Item, inc includes) itemView {
	v := itemView{item: it}
	if !inc.payload {
		v.item.Payload = nil
	}
	if !inc.input {
		v.item.Input = nil
	}
	if inc.output && it.State == redrive.StateSucceeded {
		v.output, v.outputEncoding = redrive.EncodeBytes(it.Payload)
	}
	return v
}

// streamPage is how many items an NDJSON export reads at a time: its
// memory is this many items, payloads included.
const streamPage = 200

// streamItems writes the items f selects, in ID order from f.AfterID, a
// page at a time, one JSON line each as line makes it, up to total lines
// (0: all). Each page is a query of its own, so no connection is held
// while the client reads; each page is flushed and renews the write
// deadline, so that an export that goes on progressing is not cut off by
// WriteTimeout. It returns how many lines it wrote.
func (s *server) streamItems(w http.ResponseWriter, r *http.Request, f redrive.ItemFilter, total int,
	line func(ctx context.Context, it redrive.Item) (any, error)) (int, error) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	n := 0
	for {
		f.Limit = streamPage
		if total > 0 {
			f.Limit = min(streamPage, total-n)
		}
		items, err := s.store.ListItems(ctx, f)
		if err != nil {
			return n, err
		}
		for _, it := range items {
			v, err := line(ctx, it)
			if err != nil {
				return n, err
			}
			if err := enc.Encode(v); err != nil {
				return n, err
			}
			n++
		}
		if err := bw.Flush(); err != nil {
			return n, err
		}
		_ = rc.Flush()                                        // not every writer flushes; the buffer did
		_ = rc.SetWriteDeadline(time.Now().Add(WriteTimeout)) // ErrNotSupported outside a real server
		if len(items) < f.Limit || (total > 0 && n >= total) {
			return n, nil
		}
		f.AfterID = items[len(items)-1].ID
	}
}

// resultLine is one line of GET /api/v1/runs/{id}/items.ndjson.
type resultLine struct {
	ID    int64         `json:"id"`
	Key   string        `json:"key,omitempty"`
	State redrive.State `json:"state"`
	// Output is a succeeded item's output, encoded as OutputEncoding says.
	Output         json.RawMessage `json:"output,omitempty"`
	OutputEncoding string          `json:"output_encoding,omitempty"`
	// Input is the item's input, with include=input.
	Input         json.RawMessage `json:"input,omitempty"`
	InputEncoding string          `json:"input_encoding,omitempty"`
	// Reason says why a dead or canceled item ended so.
	Reason *redrive.Reason `json:"reason,omitempty"`
}

// GET /api/v1/runs/{id}/items.ndjson?state=&include=input&after=: the
// run's items in ID order as JSON lines (default state succeeded), streamed
// a page at a time; after resumes an export past the last ID it received.
func (s *server) runItemsNDJSON(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	q := newQuery(r, "state", "include", "after", "limit")
	f := redrive.ItemFilter{RunID: id, States: q.states("state"), AfterID: q.id("after")}
	if len(f.States) == 0 {
		f.States = []redrive.State{redrive.StateSucceeded}
	}
	inc := q.includes("input")
	total := 0
	if v := q.str("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			q.fail(badField("limit", "must be a positive integer, got %q", v))
		}
		total = n
	}
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	if _, err := s.store.GetRun(r.Context(), id); err != nil {
		s.fail(w, r, "export run", err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="redrive-run-%d.ndjson"`, id))
	_, err = s.streamItems(w, r, f, total, func(_ context.Context, it redrive.Item) (any, error) {
		l := resultLine{ID: it.ID, Key: it.Key, State: it.State, Reason: it.Reason}
		if it.State == redrive.StateSucceeded {
			l.Output, l.OutputEncoding = redrive.EncodeBytes(it.Payload)
		}
		if inc.input && it.Input != nil {
			l.Input, l.InputEncoding = redrive.EncodeBytes(it.Input)
		}
		return l, nil
	})
	if err != nil {
		// The status line is gone; the truncated body and the log say it.
		s.opts.Logger.Error("web: export run", "run", id, "error", err)
	}
}

// parseWait reads the wait parameter of GET /api/v1/runs/{id}: a Go
// duration ("30s", "1m") or a number of seconds, cut to max.
func parseWait(v string, max time.Duration) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, nerr := strconv.ParseFloat(v, 64)
		if nerr != nil || secs != secs {
			return 0, badField("wait", "must be a duration such as 30s, or a number of seconds, got %q", v)
		}
		d = time.Duration(min(secs, max.Seconds()+1) * float64(time.Second))
	}
	if d < 0 {
		return 0, badField("wait", "must not be negative, got %q", v)
	}
	return min(d, max), nil
}

// waitRun polls the store until run id leaves running, wait ends, the
// client goes away or the server shuts down, and returns the run as it
// last read it. Each poll is one short query: nothing is held in between.
func (s *server) waitRun(r *http.Request, run redrive.Run, wait time.Duration) (redrive.Run, error) {
	if wait <= 0 || run.Status != redrive.RunRunning {
		return run, nil
	}
	ctx := r.Context()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(s.opts.WaitPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-shuttingDown(ctx):
			return run, nil
		case <-deadline.C:
			return s.store.GetRun(ctx, run.ID)
		case <-tick.C:
		}
		var err error
		if run, err = s.store.GetRun(ctx, run.ID); err != nil || run.Status != redrive.RunRunning {
			return run, err
		}
	}
}
