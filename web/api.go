package web

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/jsonappend"
)

// apiError is the body of every error response.
type apiError struct {
	Error string `json:"error"`
	// Field names the parameter or body field that was wrong, if one was.
	Field string `json:"field,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(true)
	if err := enc.Encode(v); err != nil {
		code = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"encoding the response failed"}` + "\n")
	}
	writeJSONBytes(w, code, buf.Bytes())
}

// writeJSONBytes answers b, a JSON document as writeJSON writes one.
func writeJSONBytes(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, code int, field, msg string) {
	writeJSON(w, code, apiError{Error: msg, Field: field})
}

// fieldError is a request parameter or body field that cannot be right.
type fieldError struct {
	field string
	msg   string
}

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

func badField(field, format string, args ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

// writeBad answers 400 for a fieldError, 413 for an oversized body, and
// 400 for anything else the request got wrong.
func writeBad(w http.ResponseWriter, err error) {
	var fe *fieldError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("request body larger than %d bytes", mbe.Limit))
	case errors.As(err, &fe):
		writeError(w, http.StatusBadRequest, fe.field, fe.Error())
	default:
		writeError(w, http.StatusBadRequest, "", userMessage(err))
	}
}

// internalNames begin the messages of the packages a request's error may
// come through (as "postgres: ..."); a client reads what went wrong, not
// which package said so.
var internalNames = []string{"redrive", "sqlite", "postgres", "runner", "bad filter"}

// userMessage is err's message without the package names in its chain
// ("postgres: redrive from: redrive: bad filter: no stage" reads "redrive
// from: no stage").
func userMessage(err error) string {
	parts := strings.Split(err.Error(), ": ")
	out := parts[:0]
	for _, p := range parts {
		if !slices.Contains(internalNames, p) {
			out = append(out, p)
		}
	}
	return strings.Join(out, ": ")
}

// Cursors are opaque to clients: a kind letter and an ID, base64url. The
// kind keeps a runs cursor from being used on items.
const (
	cursorRuns  = "r"
	cursorItems = "i"
)

func encodeCursor(kind string, id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + strconv.FormatInt(id, 10)))
}

func decodeCursor(kind, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, badField("cursor", "not a cursor returned by this endpoint")
	}
	k, v, ok := strings.Cut(string(b), ":")
	id, err := strconv.ParseInt(v, 10, 64)
	if !ok || k != kind || err != nil || id <= 0 {
		return 0, badField("cursor", "not a cursor returned by this endpoint")
	}
	return id, nil
}

// query reads URL parameters, refusing unknown ones so that a typo does
// not silently widen a selection.
type query struct {
	v   url.Values
	err error
}

func newQuery(r *http.Request, allowed ...string) *query {
	q := &query{v: r.URL.Query()}
	for k := range q.v {
		if !slices.Contains(allowed, k) {
			q.fail(badField(k, "unknown parameter (allowed: %s)", strings.Join(allowed, ", ")))
		}
	}
	return q
}

func (q *query) fail(err error) {
	if q.err == nil {
		q.err = err
	}
}

func (q *query) str(name string) string {
	vs := q.v[name]
	if len(vs) > 1 {
		q.fail(badField(name, "given more than once"))
	}
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func (q *query) id(name string) int64 {
	s := q.str(name)
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		q.fail(badField(name, "must be a positive integer, got %q", s))
	}
	return n
}

func (q *query) time(name string) time.Time {
	t, err := parseTime(name, q.str(name))
	if err != nil {
		q.fail(err)
	}
	return t
}

// parseTime parses an RFC 3339 time; "" is the zero time.
func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, badField(field, "must be an RFC 3339 time such as 2025-01-02T15:04:05Z, got %q", s)
	}
	return t, nil
}

// states reads state=a,b or repeated state parameters.
func (q *query) states(name string) []redrive.State {
	var out []redrive.State
	for _, v := range q.v[name] {
		for _, s := range strings.Split(v, ",") {
			st := redrive.State(strings.TrimSpace(s))
			if !st.Valid() {
				q.fail(badField(name, "unknown state %q (one of pending, running, succeeded, dead, canceled)", s))
				continue
			}
			if !slices.Contains(out, st) {
				out = append(out, st)
			}
		}
	}
	return out
}

func (s *server) limit(q *query) int {
	v := q.str("limit")
	if v == "" {
		return s.opts.DefaultPageSize
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > s.opts.MaxPageSize {
		q.fail(badField("limit", "must be an integer between 1 and %d, got %q", s.opts.MaxPageSize, v))
		return s.opts.DefaultPageSize
	}
	return n
}

func pathID(r *http.Request) (int64, error) {
	v := r.PathValue("id")
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, badField("id", "must be a positive integer, got %q", v)
	}
	return n, nil
}

// decodeBody decodes a JSON body into v: at most MaxBodyBytes (413
// beyond), no unknown fields, a single value. An empty body leaves v
// unchanged.
func (s *server) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	return s.decodeBodyMax(w, r, v, s.opts.MaxBodyBytes)
}

// decodeBodyMax is decodeBody with a body of at most limit bytes.
func (s *server) decodeBodyMax(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return badField("Content-Type", "must be application/json, got %q", ct)
		}
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	data, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field != "":
			// Fields of the embedded filterBody are named as the body has them.
			return badField(strings.TrimPrefix(te.Field, "filterBody."), "must be a JSON %s, got a JSON %s", jsonType(te.Type), jsonValue(te.Value))
		case errors.As(err, &te):
			return fmt.Errorf("invalid JSON body: must be a JSON object, got a JSON %s", jsonValue(te.Value))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return badField(f, "unknown field")
		}
		return syntaxError(data, err)
	}
	if dec.More() {
		return errors.New("invalid JSON body: more than one value")
	}
	return nil
}

// jsonType names the JSON type that a Go type decodes from.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return jsonKind(t.Kind())
}

// jsonValue names the kind of JSON value an UnmarshalTypeError found.
func jsonValue(v string) string {
	if v == "bool" {
		return "boolean"
	}
	return v
}

// syntaxError says where in the body a JSON syntax error is, naming the
// field it is in (items[1].input) when it is in one.
func syntaxError(data []byte, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("invalid JSON body: it ends before its JSON value does (cut short?)")
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if path := syntaxPath(data); path != "" {
		return badField(path, "not valid JSON: %s", msg)
	}
	return fmt.Errorf("invalid JSON body: %s", msg)
}

// syntaxPath reads data as far as its first syntax error and returns the
// path of the value the error is in, as the body's fields are named
// (items[1].input), or "" when the error is not inside a field.
func syntaxPath(data []byte) string {
	type frame struct {
		obj     bool
		key     string // obj: the field whose value is being read
		wantKey bool   // obj: a field name comes next
		idx     int    // array: the index of the element being read
	}
	var stack []*frame
	path := func() string {
		var b strings.Builder
		for _, f := range stack {
			switch {
			case f.obj && !f.wantKey:
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			case !f.obj && f.idx >= 0:
				b.WriteString("[" + strconv.Itoa(f.idx) + "]")
			case f.obj:
				return b.String()
			}
		}
		return b.String()
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			if len(stack) > 0 && !stack[len(stack)-1].obj {
				// The error is in the array's next element.
				stack[len(stack)-1].idx++
			}
			return path()
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].obj {
				stack[len(stack)-1].wantKey = true
			}
			continue
		}
		if top != nil && top.obj && top.wantKey {
			top.key, top.wantKey = tok.(string), false
			continue
		}
		if top != nil && !top.obj {
			top.idx++
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, wantKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{idx: -1})
		default:
			if top != nil && top.obj {
				top.wantKey = true
			}
		}
	}
}

// listResponse is a page of a list.
type listResponse[T any] struct {
	Data []T `json:"data"`
	// NextCursor fetches the next page; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// GET /api/v1/runs?pipeline=&status=&limit=&cursor=
func (s *server) listRuns(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "pipeline", "status", "limit", "cursor")
	f := redrive.RunFilter{Pipeline: q.str("pipeline"), Status: redrive.RunStatus(q.str("status"))}
	switch f.Status {
	case "", redrive.RunRunning, redrive.RunCompleted, redrive.RunPartialSuccess, redrive.RunFailed, redrive.RunAborted:
	default:
		q.fail(badField("status", "unknown run status %q (one of running, completed, partial_success, failed, aborted)", f.Status))
	}
	limit := s.limit(q)
	before, err := decodeCursor(cursorRuns, q.str("cursor"))
	if err != nil {
		q.fail(err)
	}
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	if err := redrive.CheckFilter(r.Context(), s.store, redrive.ItemFilter{Pipeline: f.Pipeline}); err != nil {
		s.filterFail(w, r, "list runs", redrive.ItemFilter{}, err)
		return
	}
	f.BeforeID, f.Limit = before, limit+1
	runs, err := s.store.ListRuns(r.Context(), f)
	if err != nil {
		s.fail(w, r, "list runs", err)
		return
	}
	resp := listResponse[redrive.Run]{Data: runs}
	if len(runs) > limit {
		resp.Data = runs[:limit]
		resp.NextCursor = encodeCursor(cursorRuns, runs[limit-1].ID)
	}
	if resp.Data == nil {
		resp.Data = []redrive.Run{}
	}
	writeJSON(w, http.StatusOK, resp)
}

// runDetail is the response of GET /api/v1/runs/{id}.
type runDetail struct {
	Run redrive.Run `json:"run"`
	// SuccessRate is succeeded over total.
	SuccessRate    float64                   `json:"success_rate"`
	Stages         []redrive.StateCount      `json:"stages"`
	RetryHistogram []redrive.HistogramBucket `json:"retry_histogram"`
	TopErrors      []redrive.ErrorCount      `json:"top_errors"`
	// PaceWaits are how long the run's calls waited on their stages' flow
	// control before their attempts started, stage by stage; absent when
	// the store does not keep them.
	PaceWaits []redrive.PaceWait `json:"pace_waits,omitempty"`
}

// GET /api/v1/runs/{id}?wait=: with wait, a running run is answered when
// it finishes, or when the wait (at most MaxWait) ends, as it then is.
func (s *server) getRun(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	var wait time.Duration
	if err == nil {
		q := newQuery(r, "wait")
		wait, err = parseWait(q.str("wait"), s.opts.MaxWait)
		if q.err != nil {
			err = q.err
		}
	}
	if err != nil {
		writeBad(w, err)
		return
	}
	ctx := r.Context()
	run, err := s.store.GetRun(ctx, id)
	if err == nil {
		run, err = s.waitRun(r, run, wait)
	}
	if err != nil {
		s.fail(w, r, "get run", err)
		return
	}
	d := runDetail{Run: run, SuccessRate: run.SuccessRate()}
	if d.Stages, err = s.store.StateCounts(ctx, id); err != nil {
		s.fail(w, r, "get run", err)
		return
	}
	if d.RetryHistogram, err = s.store.RetryHistogram(ctx, id); err != nil {
		s.fail(w, r, "get run", err)
		return
	}
	if d.TopErrors, err = s.store.TopErrors(ctx, redrive.ErrorFilter{RunID: id}); err != nil {
		s.fail(w, r, "get run", err)
		return
	}
	if pr, ok := s.store.(redrive.PaceRecorder); ok {
		if d.PaceWaits, err = pr.PaceWaits(ctx, id); err != nil {
			s.fail(w, r, "get run", err)
			return
		}
	}
	nonNil(&d.Stages)
	nonNil(&d.RetryHistogram)
	nonNil(&d.TopErrors)
	writeJSON(w, http.StatusOK, d)
}

func nonNil[T any](s *[]T) {
	if *s == nil {
		*s = []T{}
	}
}

var itemParams = []string{"run", "pipeline", "stage", "key", "state", "class", "error_contains", "fingerprint", "action", "since", "until", "limit", "cursor", "include"}

// itemFilter reads the item filter parameters shared by /items and /dlq.
func (s *server) itemFilter(q *query) redrive.ItemFilter {
	f := redrive.ItemFilter{
		RunID:         q.id("run"),
		Pipeline:      q.str("pipeline"),
		Stage:         q.str("stage"),
		Key:           q.str("key"),
		States:        q.states("state"),
		Class:         q.str("class"),
		ErrorContains: q.str("error_contains"),
		Fingerprint:   q.str("fingerprint"),
		ActionID:      q.id("action"),
		Since:         q.time("since"),
		Until:         q.time("until"),
		Limit:         s.limit(q),
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		q.fail(badField("until", "is before since"))
	}
	after, err := decodeCursor(cursorItems, q.str("cursor"))
	if err != nil {
		q.fail(err)
	}
	f.AfterID = after
	return f
}

// GET /api/v1/items?include=output,payload,input
func (s *server) listItems(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, itemParams...)
	f := s.itemFilter(q)
	inc := q.includes("output", "payload", "input")
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	f, err := redrive.ResolveFilter(r.Context(), s.store, f)
	if err != nil {
		s.filterFail(w, r, "list items", f, err)
		return
	}
	s.writeItems(w, r, f, inc)
}

// GET /api/v1/dlq: dead items (state=canceled, or state=dead,canceled,
// selects canceled ones too).
func (s *server) listDLQ(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, itemParams...)
	f := s.itemFilter(q)
	f.States = dlqStates(q, f.States)
	inc := q.includes("payload", "input")
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	f, err := redrive.ResolveFilter(r.Context(), s.store, f)
	if err != nil {
		s.filterFail(w, r, "list dead items", f, err)
		return
	}
	s.writeItems(w, r, f, inc)
}

func dlqStates(q *query, states []redrive.State) []redrive.State {
	if len(states) == 0 {
		return []redrive.State{redrive.StateDead}
	}
	for _, st := range states {
		if st != redrive.StateDead && st != redrive.StateCanceled {
			q.fail(badField("state", "the dead-letter queue holds dead and canceled items, not %s", st))
		}
	}
	return states
}

// itemSummary is an item without its payload and input, which
// GET /api/v1/items/{id} returns.
func itemSummary(it redrive.Item) redrive.Item {
	it.Payload, it.Input = nil, nil
	return it
}

// writeItems answers a page of items, with the parts inc asks for.
func (s *server) writeItems(w http.ResponseWriter, r *http.Request, f redrive.ItemFilter, inc includes) {
	limit := f.Limit
	f.Limit = limit + 1
	items, err := s.store.ListItems(r.Context(), f)
	if err != nil {
		s.fail(w, r, "list items", err)
		return
	}
	// The page is listResponse[itemView]'s JSON, written item by item.
	next := ""
	if len(items) > limit {
		items, next = items[:limit], encodeCursor(cursorItems, items[limit-1].ID)
	}
	b := make([]byte, 0, 64+len(items)*768)
	b = append(b, `{"data":[`...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = viewItem(it, inc).appendJSON(b); err != nil {
			s.fail(w, r, "list items", err)
			return
		}
	}
	b = append(b, ']')
	if next != "" {
		b = append(b, `,"next_cursor":`...)
		b = jsonappend.String(b, next)
	}
	writeJSONBytes(w, http.StatusOK, append(b, "}\n"...))
}

// itemDetail is the response of GET /api/v1/items/{id}.
type itemDetail struct {
	// Item has its payload and input, each with its encoding.
	Item redrive.Item `json:"item"`
	// Output is a succeeded item's result (its last stage's output), as
	// OutputEncoding says; item.payload holds the same.
	Output         json.RawMessage   `json:"output,omitempty"`
	OutputEncoding string            `json:"output_encoding,omitempty"`
	Attempts       []redrive.Attempt `json:"attempts"`
	// Actions are the audit log's actions that changed the item (a
	// redrive, a cancel, a retry now), oldest first.
	Actions []redrive.AuditAction `json:"actions"`
}

// GET /api/v1/items/{id}
func (s *server) getItem(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err == nil {
		err = newQuery(r).err
	}
	if err != nil {
		writeBad(w, err)
		return
	}
	it, err := s.store.GetItem(r.Context(), id)
	if err != nil {
		s.fail(w, r, "get item", err)
		return
	}
	atts, err := s.store.Attempts(r.Context(), id)
	if err != nil {
		s.fail(w, r, "get item", err)
		return
	}
	acts, err := s.store.ItemActions(r.Context(), id)
	if err != nil {
		s.fail(w, r, "get item", err)
		return
	}
	nonNil(&atts)
	nonNil(&acts)
	d := itemDetail{Item: it, Attempts: atts, Actions: acts}
	if it.State == redrive.StateSucceeded {
		d.Output, d.OutputEncoding = redrive.EncodeBytes(it.Payload)
	}
	writeJSON(w, http.StatusOK, d)
}

// statsResponse is the response of GET /api/v1/stats.
type statsResponse struct {
	// Totals adds up the items by state.
	Totals         redrive.Counts            `json:"totals"`
	Stages         []redrive.StateCount      `json:"stages"`
	RetryHistogram []redrive.HistogramBucket `json:"retry_histogram"`
	TopErrors      []redrive.ErrorCount      `json:"top_errors"`
}

// GET /api/v1/stats?run=&pipeline=
func (s *server) stats(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "run", "pipeline")
	runID, pipeline := q.id("run"), q.str("pipeline")
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	ctx := r.Context()
	if err := redrive.CheckFilter(ctx, s.store, redrive.ItemFilter{RunID: runID, Pipeline: pipeline}); err != nil {
		s.filterFail(w, r, "stats", redrive.ItemFilter{RunID: runID}, err)
		return
	}
	counts, err := s.store.StateCounts(ctx, runID)
	if err != nil {
		s.fail(w, r, "stats", err)
		return
	}
	resp := statsResponse{Stages: []redrive.StateCount{}}
	for _, c := range counts {
		if pipeline != "" && c.Pipeline != pipeline {
			continue
		}
		resp.Stages = append(resp.Stages, c)
		resp.Totals.Add(c.State, c.Count)
	}
	if resp.RetryHistogram, err = s.store.RetryHistogram(ctx, runID); err != nil {
		s.fail(w, r, "stats", err)
		return
	}
	if resp.TopErrors, err = s.store.TopErrors(ctx, redrive.ErrorFilter{RunID: runID, Pipeline: pipeline}); err != nil {
		s.fail(w, r, "stats", err)
		return
	}
	nonNil(&resp.RetryHistogram)
	nonNil(&resp.TopErrors)
	writeJSON(w, http.StatusOK, resp)
}

// GET /api/v1/dlq/export: JSON lines of dead items with their reasons and
// attempt history (redrive.ExportRecord). limit bounds the total
// (default: everything); there is no cursor.
func (s *server) exportDLQ(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "run", "pipeline", "stage", "key", "state", "class", "error_contains", "fingerprint", "action", "since", "until", "limit")
	f := redrive.ItemFilter{
		RunID:         q.id("run"),
		Pipeline:      q.str("pipeline"),
		Stage:         q.str("stage"),
		Key:           q.str("key"),
		States:        dlqStates(q, q.states("state")),
		Class:         q.str("class"),
		ErrorContains: q.str("error_contains"),
		Fingerprint:   q.str("fingerprint"),
		ActionID:      q.id("action"),
		Since:         q.time("since"),
		Until:         q.time("until"),
	}
	if v := q.str("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			q.fail(badField("limit", "must be a positive integer, got %q", v))
		}
		f.Limit = n
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		q.fail(badField("until", "is before since"))
	}
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	if err := f.Validate(); err != nil {
		writeBad(w, err)
		return
	}
	f, err := redrive.ResolveFilter(r.Context(), s.store, f)
	if err != nil {
		s.filterFail(w, r, "export", f, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", `attachment; filename="redrive-dlq.jsonl"`)
	if _, err := redrive.Export(r.Context(), s.store, f, w); err != nil {
		// The status line is gone; the truncated body and the log say it.
		s.opts.Logger.Error("web: export", "error", err)
	}
}

// maxActionIDs bounds the ids of one action request (the item page acts
// on one item; a list of IDs is for scripts).
const maxActionIDs = 1000

// filterBody is the item filter of the bodies of the write endpoints, as
// the list endpoints read it from the URL.
type filterBody struct {
	Run           int64           `json:"run"`
	Pipeline      string          `json:"pipeline"`
	Stage         string          `json:"stage"`
	Key           string          `json:"key"`
	States        []redrive.State `json:"states"`
	Class         string          `json:"class"`
	ErrorContains string          `json:"error_contains"`
	// Fingerprint selects the items of one error group (the fingerprint
	// of a group of GET /api/v1/errors). Default "": any.
	Fingerprint string `json:"fingerprint"`
	Since       string `json:"since"`
	Until       string `json:"until"`
	Limit       int    `json:"limit"`
	// IDs, when set, selects only these items (the item page's actions).
	IDs []int64 `json:"ids"`
	// Action, when set, selects only the items that audit log entry
	// changed (redrive.ItemFilter.ActionID). Default 0: any.
	Action int64 `json:"action"`
}

// filter returns the filter, refusing states outside allowed.
func (d filterBody) filter(allowed ...redrive.State) (redrive.ItemFilter, error) {
	f := redrive.ItemFilter{RunID: d.Run, Pipeline: d.Pipeline, Stage: d.Stage, Key: d.Key, Class: d.Class,
		ErrorContains: d.ErrorContains, Fingerprint: d.Fingerprint, Limit: d.Limit, IDs: d.IDs, ActionID: d.Action}
	if d.Run < 0 {
		return f, badField("run", "must be a positive run ID")
	}
	if d.Action < 0 {
		return f, badField("action", "must be a positive audit entry ID")
	}
	var err error
	if f.Since, err = parseTime("since", d.Since); err != nil {
		return f, err
	}
	if f.Until, err = parseTime("until", d.Until); err != nil {
		return f, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return f, badField("until", "is before since")
	}
	if d.Limit < 0 {
		return f, badField("limit", "must not be negative")
	}
	if len(d.IDs) > maxActionIDs {
		return f, badField("ids", "more than %d IDs", maxActionIDs)
	}
	for _, id := range d.IDs {
		if id <= 0 {
			return f, badField("ids", "must be positive item IDs, got %d", id)
		}
	}
	for _, st := range d.States {
		if !slices.Contains(allowed, st) {
			return f, badField("states", "only %s items can be selected here, not %q", joinStates(allowed), st)
		}
	}
	f.States = d.States
	return f, nil
}

func joinStates(ss []redrive.State) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, " and ")
}

func (d filterBody) empty() bool {
	return d.Run == 0 && d.Pipeline == "" && d.Stage == "" && d.Key == "" && d.Class == "" && d.ErrorContains == "" &&
		d.Fingerprint == "" && d.Since == "" && d.Until == "" && d.Limit == 0 && len(d.IDs) == 0 && d.Action == 0
}

// dlqRequest is the body of POST /api/v1/dlq/redrive and /purge.
type dlqRequest struct {
	filterBody
	DryRun bool `json:"dry_run"`
	// Rate is for redrive only: items per second, 0 = all due now.
	Rate float64 `json:"rate"`
	// FromStage is for redrive only: restart the items at this earlier
	// stage with the input it had (redrive.RedriveOptions.FromStage).
	FromStage string `json:"from_stage"`
	// All must be true for a purge without any filter field.
	All bool `json:"all"`
}

func (d dlqRequest) filter() (redrive.ItemFilter, error) {
	return d.filterBody.filter(redrive.StateDead, redrive.StateCanceled)
}

// dlqResponse is the response of the DLQ write endpoints.
type dlqResponse struct {
	// Count is how many items were redriven or purged, or with dry_run
	// would be.
	Count  int  `json:"count"`
	DryRun bool `json:"dry_run"`
	// Warning, after a redrive, names the pipelines that no live worker
	// serves: their redriven items stay pending until one runs.
	Warning string `json:"warning,omitempty"`
}

// POST /api/v1/dlq/redrive
func (s *server) redrive(w http.ResponseWriter, r *http.Request) {
	var req dlqRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeBad(w, err)
		return
	}
	f, err := req.filter()
	if err == nil && (req.Rate < 0 || req.Rate != req.Rate) {
		err = badField("rate", "must be a number of items per second, 0 or more")
	}
	if err == nil && req.All {
		err = badField("all", "is for purge only")
	}
	if err != nil {
		writeBad(w, err)
		return
	}
	f, err = redrive.ResolveFilter(r.Context(), s.store, f)
	if err != nil {
		s.filterFail(w, r, "redrive", f, err)
		return
	}
	opts := redrive.RedriveOptions{DryRun: req.DryRun, Rate: req.Rate, Now: s.opts.Now(), FromStage: req.FromStage}
	if req.DryRun {
		n, err := redrive.Redrive(r.Context(), s.store, f, opts)
		if err != nil {
			s.fail(w, r, "redrive", err)
			return
		}
		writeJSON(w, http.StatusOK, dlqResponse{Count: n, DryRun: true})
		return
	}
	if req.FromStage != "" {
		// A redrive from a stage some items never reached changes
		// nothing: refuse it before it is recorded.
		dry := opts
		dry.DryRun = true
		if _, err := redrive.Redrive(r.Context(), s.store, f, dry); err != nil {
			s.fail(w, r, "redrive", err)
			return
		}
	}
	mark := f
	if len(mark.States) == 0 {
		mark.States = []redrive.State{redrive.StateDead}
	}
	act := s.beginAudit(r, "redrive", f, mark, RedriveDetail(req.Rate, req.FromStage))
	n, err := redrive.Redrive(r.Context(), s.store, f, opts)
	warning := act.end(s, r, n, err)
	if err != nil {
		s.fail(w, r, "redrive", err)
		return
	}
	resp := dlqResponse{Count: n}
	s.opts.Logger.Info("web: redrive", "count", n, "run", f.RunID, "pipeline", f.Pipeline, "stage", f.Stage, "from_stage", req.FromStage)
	s.emit(redrive.Redriven{Filter: f, Count: n})
	if n > 0 {
		resp.Warning = joinWarnings(s.unservedWarning(r, f), warning)
	}
	writeJSON(w, http.StatusOK, resp)
}

// POST /api/v1/dlq/purge
func (s *server) purge(w http.ResponseWriter, r *http.Request) {
	var req dlqRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeBad(w, err)
		return
	}
	f, err := req.filter()
	if err == nil && req.Rate != 0 {
		err = badField("rate", "is for redrive only")
	}
	if err == nil && req.empty() && !req.All && !req.DryRun {
		err = badField("all", `a purge without any filter deletes every dead item: set "all": true to mean it`)
	}
	if err == nil && req.FromStage != "" {
		err = badField("from_stage", "is for redrive only")
	}
	if err != nil {
		writeBad(w, err)
		return
	}
	f, err = redrive.ResolveFilter(r.Context(), s.store, f)
	if err != nil {
		s.filterFail(w, r, "purge", f, err)
		return
	}
	n, err := redrive.Purge(r.Context(), s.store, f, req.DryRun)
	if err != nil {
		s.fail(w, r, "purge", err)
		return
	}
	resp := dlqResponse{Count: n, DryRun: req.DryRun}
	if !req.DryRun {
		s.opts.Logger.Info("web: purge", "count", n, "run", f.RunID, "pipeline", f.Pipeline, "stage", f.Stage)
		if n > 0 {
			resp.Warning = s.audit(r, "purge", f, n, "")
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// cancelRequest is the body of POST /api/v1/runs/{id}/cancel.
type cancelRequest struct {
	// Reason is recorded on the canceled items and the run.
	// Default DefaultCancelReason.
	Reason string `json:"reason"`
}

// cancelArgs reads the ID in the path and the reason in the body of a
// cancel request (DefaultCancelReason when empty). It answers the request
// itself and reports false when either is wrong.
func (s *server) cancelArgs(w http.ResponseWriter, r *http.Request) (id int64, reason string, ok bool) {
	id, err := pathID(r)
	if err != nil {
		writeBad(w, err)
		return 0, "", false
	}
	var req cancelRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeBad(w, err)
		return 0, "", false
	}
	reason = strings.TrimSpace(req.Reason)
	if reason == "" {
		reason = DefaultCancelReason
	}
	if len(reason) > 1000 {
		writeBad(w, badField("reason", "longer than 1000 bytes"))
		return 0, "", false
	}
	return id, reason, true
}

// cancelResponse is the response of POST /api/v1/runs/{id}/cancel.
type cancelResponse struct {
	// Canceled is how many pending items were canceled.
	Canceled int         `json:"canceled"`
	Run      redrive.Run `json:"run"`
}

// POST /api/v1/runs/{id}/cancel: the run is marked aborted and its
// pending items canceled with the reason. Running items finish their
// attempt.
func (s *server) cancelRun(w http.ResponseWriter, r *http.Request) {
	id, reason, ok := s.cancelArgs(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	run, err := s.store.GetRun(ctx, id)
	if err != nil {
		s.fail(w, r, "cancel run", err)
		return
	}
	if run.Status != redrive.RunRunning {
		writeError(w, http.StatusConflict, "", fmt.Sprintf("run %d is %s, not running", id, run.Status))
		return
	}
	now := s.opts.Now()
	// Mark the run first so that engines stop moving its items on, then
	// cancel what is pending.
	if ok, err := s.store.FinishRun(ctx, id, redrive.RunAborted, reason, now); err != nil {
		s.fail(w, r, "cancel run", err)
		return
	} else if !ok {
		// Finished by its workers (or canceled) since it was read.
		writeError(w, http.StatusConflict, "", fmt.Sprintf("run %d is no longer running", id))
		return
	}
	n, err := s.store.CancelPending(ctx, redrive.ItemFilter{RunID: id, States: []redrive.State{redrive.StatePending}},
		redrive.Reason{Class: redrive.ClassCanceled, Error: reason, At: now})
	if err != nil {
		s.fail(w, r, "cancel run", err)
		return
	}
	s.opts.Logger.Info("web: run canceled", "run", id, "canceled", n)
	if run, err = s.store.GetRun(ctx, id); err != nil {
		s.fail(w, r, "cancel run", err)
		return
	}
	writeJSON(w, http.StatusOK, cancelResponse{Canceled: n, Run: run})
}

func (s *server) emit(ev redrive.Event) {
	for _, o := range s.opts.Observers {
		o(ev)
	}
}

// unservedWarning names the pipeline of redriven items when no live worker
// serves it, or returns "".
func (s *server) unservedWarning(r *http.Request, f redrive.ItemFilter) string {
	p := f.Pipeline
	if p == "" && f.RunID != 0 {
		if run, err := s.store.GetRun(r.Context(), f.RunID); err == nil {
			p = run.Pipeline
		}
	}
	if p == "" {
		return ""
	}
	live, err := redrive.LiveWorkers(r.Context(), s.store, p, s.opts.Now())
	if err != nil || len(live) > 0 {
		return ""
	}
	return "no live worker serves pipeline " + p + ": the redriven items stay pending until one runs"
}

// filterFail answers a filter that CheckFilter refused: 404 for a run that
// does not exist, 400 naming the field otherwise.
func (s *server) filterFail(w http.ResponseWriter, r *http.Request, op string, f redrive.ItemFilter, err error) {
	if errors.Is(err, redrive.ErrNotFound) {
		writeError(w, http.StatusNotFound, "run", fmt.Sprintf("run %d does not exist", f.RunID))
		return
	}
	s.fail(w, r, op, err)
}
