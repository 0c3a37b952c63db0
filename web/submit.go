package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redrive/redrive"
)

// PipelineRef names a pipeline the submit endpoints accept items for, and
// the stage its items start at.
type PipelineRef struct {
	Name       string `json:"name"`
	FirstStage string `json:"first_stage"`
}

// Refs returns the references of pipelines, for Options.Pipelines.
func Refs(ps ...redrive.Pipeline) []PipelineRef {
	out := make([]PipelineRef, 0, len(ps))
	for _, p := range ps {
		if len(p.Stages) > 0 {
			out = append(out, PipelineRef{Name: p.Name, FirstStage: p.Stages[0].Name})
		}
	}
	return out
}

// Limits of submitted fields.
const (
	// MaxKeyBytes bounds an item's idempotency key.
	MaxKeyBytes = 512
	// MaxCallbackBytes bounds an item's callback URL.
	MaxCallbackBytes = 2048
	// MaxIdempotencyKeyBytes bounds the Idempotency-Key header.
	MaxIdempotencyKeyBytes = 255
	// DefaultSubmitRun is the run that POST /api/v1/pipelines/{name}/items
	// adds to when the body names none.
	DefaultSubmitRun = "default"
)

// submitItem is one item of a submit request.
type submitItem struct {
	// Key is the item's idempotency key, unique within its pipeline.
	Key string `json:"key"`
	// Input is the first stage's input, any JSON value.
	Input json.RawMessage `json:"input"`
	// Priority orders due items, higher first.
	Priority int `json:"priority"`
	// OrderAt orders due items of equal priority, oldest first.
	OrderAt string `json:"order_at"`
	// Callback is where notifications about the item go.
	Callback string `json:"callback"`
}

// submittedItem is the result of submitting one item.
type submittedItem struct {
	ID  int64  `json:"id"`
	Key string `json:"key,omitempty"`
	// Existing is true when an item with the key existed: it was not
	// added again, and ID is that item's.
	Existing bool `json:"existing"`
	// RunID is the run the item belongs to: the request's, or, for an
	// existing item, the run it was first submitted to.
	RunID int64 `json:"run_id,omitempty"`
}

// submitResponse is the response of every submit endpoint.
type submitResponse struct {
	Run redrive.Run `json:"run"`
	// Created is true when this request created the run.
	Created bool            `json:"created"`
	Items   []submittedItem `json:"items"`
	// Added counts the new items, Existing those whose key was known.
	Added    int `json:"added"`
	Existing int `json:"existing"`
}

// createRunRequest is the body of POST /api/v1/runs.
type createRunRequest struct {
	Pipeline         string            `json:"pipeline"`
	Name             string            `json:"name"`
	SuccessThreshold float64           `json:"success_threshold"`
	PartialThreshold float64           `json:"partial_threshold"`
	FailureBudget    float64           `json:"failure_budget"`
	MinItems         int               `json:"min_items"`
	Items            []json.RawMessage `json:"items"`
}

// addItemsRequest is the body of POST /api/v1/runs/{id}/items and
// POST /api/v1/pipelines/{name}/items.
type addItemsRequest struct {
	// Run names the run of a pipeline submit; default DefaultSubmitRun.
	Run   string            `json:"run"`
	Items []json.RawMessage `json:"items"`
}

func (s *server) pipelineRef(name string) (PipelineRef, error) {
	for _, p := range s.opts.Pipelines {
		if p.Name == name {
			return p, nil
		}
	}
	names := make([]string, len(s.opts.Pipelines))
	for i, p := range s.opts.Pipelines {
		names[i] = p.Name
	}
	accepted := "none"
	if len(names) > 0 {
		accepted = strings.Join(names, ", ")
	}
	// The message is the client's answer (404) as it is.
	return PipelineRef{}, fmt.Errorf("unknown pipeline %q (this server accepts items for: %s)", name, accepted)
}

// idempotencyKey reads the Idempotency-Key header: a retried request with
// the same header value gets the same run and items.
func idempotencyKey(r *http.Request) (string, error) {
	k := r.Header.Get("Idempotency-Key")
	if len(k) > MaxIdempotencyKeyBytes {
		return "", badField("Idempotency-Key", "longer than %d bytes", MaxIdempotencyKeyBytes)
	}
	if !printable(k) {
		return "", badField("Idempotency-Key", "must be printable text")
	}
	return k, nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return false
		}
	}
	return true
}

// items decodes and validates a batch. Items without a key get one from
// the Idempotency-Key header and their position, so that a retry of the
// same request adds nothing twice. Every item is checked before anything
// is written.
func (s *server) items(raw []json.RawMessage, idem string) ([]redrive.NewItem, error) {
	if raw == nil {
		return nil, badField("items", "required: a list of items (it may be empty)")
	}
	if len(raw) > s.opts.MaxBatchItems {
		return nil, badField("items", "%d items: at most %d per request; send several batches", len(raw), s.opts.MaxBatchItems)
	}
	out := make([]redrive.NewItem, len(raw))
	seen := make(map[string]int, len(raw))
	// One decoder reads the items as a stream of values: a decoder per
	// item cost a submit of 500 items a sixth of its handler's time.
	n := 0
	for _, b := range raw {
		n += len(b) + 1
	}
	stream := make([]byte, 0, n)
	for _, b := range raw {
		stream = append(append(stream, b...), '\n')
	}
	dec := json.NewDecoder(bytes.NewReader(stream))
	dec.DisallowUnknownFields()
	for i := range raw {
		var it submitItem
		if err := dec.Decode(&it); err != nil {
			field := itemField(i)
			var te *json.UnmarshalTypeError
			switch {
			case errors.As(err, &te) && te.Field != "":
				return nil, badField(field+"."+te.Field, "must be a JSON %s, got a JSON %s", jsonKind(te.Type.Kind()), te.Value)
			case errors.As(err, &te):
				return nil, badField(field, "must be an object with an input, got a JSON %s", te.Value)
			case strings.HasPrefix(err.Error(), "json: unknown field "):
				f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
				return nil, badField(field+"."+f, "unknown field (key, input, priority, order_at, callback)")
			}
			return nil, badField(field, "%v", err)
		}
		if len(it.Input) == 0 {
			return nil, badField(itemField(i)+".input", "required: the first stage's input, any JSON value")
		}
		if it.Key == "" && idem != "" {
			it.Key = fmt.Sprintf("%s#%d", idem, i)
		}
		if len(it.Key) > MaxKeyBytes {
			return nil, badField(itemField(i)+".key", "longer than %d bytes", MaxKeyBytes)
		}
		if !printable(it.Key) {
			return nil, badField(itemField(i)+".key", "must be printable text")
		}
		if it.Key != "" {
			if j, dup := seen[it.Key]; dup {
				return nil, badField(itemField(i)+".key", "%q is also the key of items[%d]", it.Key, j)
			}
			seen[it.Key] = i
		}
		if it.Priority < -1<<31 || it.Priority > 1<<31-1 {
			return nil, badField(itemField(i)+".priority", "must fit in 32 bits")
		}
		orderAt, err := parseTime(itemField(i)+".order_at", it.OrderAt)
		if err != nil {
			return nil, err
		}
		if err := checkCallback(itemField(i)+".callback", it.Callback); err != nil {
			return nil, err
		}
		out[i] = newItem(it, orderAt)
	}
	return out, nil
}

// itemField names item i of a batch in errors.
func itemField(i int) string { return "items[" + strconv.Itoa(i) + "]" }

// jsonKind names the JSON type a Go kind decodes from.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return "object"
}

// checkCallback accepts an absolute http or https URL without user
// information (secrets belong in the signature, not the URL).
func checkCallback(field, s string) error {
	if s == "" {
		return nil
	}
	if len(s) > MaxCallbackBytes {
		return badField(field, "longer than %d bytes", MaxCallbackBytes)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return badField(field, "must be an absolute http or https URL, got %q", s)
	}
	if u.User != nil {
		return badField(field, "must not carry user information")
	}
	if u.Fragment != "" {
		return badField(field, "must not have a fragment")
	}
	return nil
}

// callbacksSigned refuses callbacks that no secret would sign: a receiver
// could not tell their notifications from forgeries.
func (s *server) callbacksSigned(pipeline string, items []redrive.NewItem) error {
	for i, it := range items {
		if it.Callback != "" && (s.opts.CallbackSigned == nil || !s.opts.CallbackSigned(pipeline)) {
			return badField(fmt.Sprintf("items[%d].callback", i),
				"no secret signs the callbacks of pipeline %q: the server needs its webhook or a callback secret (redrive serve --callback-secret-file)", pipeline)
		}
	}
	return nil
}

func (s *server) submitted(run redrive.Run, created bool, items []redrive.NewItem, res []redrive.Enqueued) submitResponse {
	out := submitResponse{Run: run, Created: created, Items: make([]submittedItem, len(res))}
	for i, e := range res {
		out.Items[i] = submittedItem{ID: e.ID, Key: items[i].Key, Existing: e.Existing}
		if e.Existing {
			out.Existing++
		} else {
			out.Items[i].RunID = run.ID
			out.Added++
		}
	}
	return out
}

// submit binds the request's key (rk) to the request and run, adds items
// to run and answers with the run as it is after.
func (s *server) submit(w http.ResponseWriter, r *http.Request, run redrive.Run, created bool, ref PipelineRef, items []redrive.NewItem, rk requestKey) {
	if !s.bind(w, r, rk, run, created) {
		return
	}
	// A submit that reached the store finishes even if the client goes
	// away: its retry then finds the items. Without a cancelable context
	// the SQLite driver also skips watching each statement for
	// cancellation, which costs more than the insert on large batches.
	ctx := context.WithoutCancel(r.Context())
	withTraceHeaders(r, items)
	run, res, err := redrive.Submit(ctx, s.store, run, ref.FirstStage, items, s.opts.Now())
	if err != nil {
		if errors.Is(err, redrive.ErrRunAborted) {
			writeError(w, http.StatusConflict, "", fmt.Sprintf("run %d was aborted (%s): it takes no new items", run.ID, run.Reason))
			return
		}
		s.fail(w, r, "submit", err)
		return
	}
	resp := s.submitted(run, created, items, res)
	if resp.Existing > 0 {
		s.existingRuns(ctx, &resp)
	}
	if created && len(items) > 0 && resp.Added == 0 {
		// Every item existed: the run this request created has nothing to
		// do, and nothing would ever finish it.
		resp.Run = s.finishEmpty(ctx, resp.Run, noNewItems(resp))
	}
	s.opts.Logger.Info("web: submit", "run", run.ID, "pipeline", run.Pipeline, "added", resp.Added, "existing", resp.Existing)
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	if rk.replay {
		w.Header().Set(ReplayedHeader, "true")
	}
	writeJSON(w, code, resp)
}

// existingRuns fills in the runs of the items of resp that existed before,
// so that a client learns where its items went. A failed read leaves them
// out: the items were submitted all the same.
func (s *server) existingRuns(ctx context.Context, resp *submitResponse) {
	var ids []int64
	for _, it := range resp.Items {
		if it.Existing {
			ids = append(ids, it.ID)
		}
	}
	found, err := s.store.ListItems(ctx, redrive.ItemFilter{IDs: ids, Limit: len(ids)})
	if err != nil {
		s.opts.Logger.Warn("web: submit: reading the runs of existing items failed", "error", err)
		return
	}
	runOf := make(map[int64]int64, len(found))
	for _, it := range found {
		runOf[it.ID] = it.RunID
	}
	for i, it := range resp.Items {
		if it.Existing {
			resp.Items[i].RunID = runOf[it.ID]
		}
	}
}

// noNewItems is the reason of a run finished at once because every item
// submitted with it existed already.
func noNewItems(resp submitResponse) string {
	var runs []string
	for _, it := range resp.Items {
		if r := strconv.FormatInt(it.RunID, 10); it.RunID != 0 && !slices.Contains(runs, r) {
			runs = append(runs, r)
		}
	}
	where := ""
	switch {
	case len(runs) == 1:
		where = " (of run " + runs[0] + ")"
	case len(runs) > 1 && len(runs) <= 5:
		where = " (of runs " + strings.Join(runs, ", ") + ")"
	case len(runs) > 5:
		where = " (of runs " + strings.Join(runs[:5], ", ") + ", ...)"
	}
	if len(resp.Items) == 1 {
		return "no new items: the submitted item's key is that of an existing item" + where
	}
	return fmt.Sprintf("no new items: the keys of all %d submitted items are those of existing items%s", len(resp.Items), where)
}

// finishEmpty finishes run, which a request created and left empty, as
// completed with reason, so that it does not stay running with nothing to
// run (the engine finishes runs when their items finish, and an empty run
// has none). It returns the run as it is after.
func (s *server) finishEmpty(ctx context.Context, run redrive.Run, reason string) redrive.Run {
	ok, err := s.store.FinishRun(ctx, run.ID, redrive.RunCompleted, reason, s.opts.Now())
	if err != nil {
		s.opts.Logger.Error("web: finishing an empty run failed", "run", run.ID, "error", err)
		return run
	}
	after, err := s.store.GetRun(ctx, run.ID)
	if err != nil {
		s.opts.Logger.Error("web: reading an empty run failed", "run", run.ID, "error", err)
		return run
	}
	if ok && after.Status == redrive.RunCompleted && after.Counts.Total > 0 {
		// Another request added items to the run (by its name) between
		// this one's insert and the finish: reopen it, as a submit
		// reopens a finished run it adds to.
		if err := s.store.SetRunStatus(ctx, run.ID, redrive.RunRunning, "", s.opts.Now()); err != nil {
			s.opts.Logger.Error("web: reopening a run failed", "run", run.ID, "error", err)
			return after
		}
		after.Status, after.FinishedAt, after.Reason = redrive.RunRunning, time.Time{}, ""
	}
	return after
}

// POST /api/v1/runs: create a run (or, with a name or Idempotency-Key
// already used, find it) and add its items.
func (s *server) createRun(w http.ResponseWriter, r *http.Request) {
	var req createRunRequest
	if err := s.decodeBodyMax(w, r, &req, s.opts.MaxSubmitBytes); err != nil {
		writeBad(w, err)
		return
	}
	idem, err := idempotencyKey(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	if req.Pipeline == "" {
		writeBad(w, badField("pipeline", "required: the name of the pipeline"))
		return
	}
	ref, err := s.pipelineRef(req.Pipeline)
	if err != nil {
		writeError(w, http.StatusNotFound, "pipeline", err.Error())
		return
	}
	opts := redrive.RunOptions{Name: req.Name, SuccessThreshold: req.SuccessThreshold, PartialThreshold: req.PartialThreshold,
		FailureBudget: req.FailureBudget, MinItems: req.MinItems}
	if opts.Name == "" {
		opts.Name = idem
	}
	if len(opts.Name) > MaxKeyBytes || !printable(opts.Name) {
		writeBad(w, badField("name", "must be printable text of at most %d bytes", MaxKeyBytes))
		return
	}
	if err := checkRunOptions(opts); err != nil {
		writeBad(w, err)
		return
	}
	items, err := s.items(req.Items, idem)
	if err == nil {
		err = s.callbacksSigned(ref.Name, items)
	}
	if err != nil {
		writeBad(w, err)
		return
	}
	rk, ok := s.lookUpKey(w, r, idem, canonicalRequest{Endpoint: "POST /api/v1/runs", Pipeline: ref.Name, Run: opts.Name, Options: &opts}, items)
	if !ok {
		return
	}
	run, created, err := s.store.CreateRun(r.Context(), ref.Name, opts, s.opts.Now())
	if err != nil {
		s.fail(w, r, "create run", err)
		return
	}
	s.submit(w, r, run, created, ref, items, rk)
}

// checkRunOptions refuses run options that cannot be right, naming the
// body's field.
func checkRunOptions(o redrive.RunOptions) error {
	for _, f := range []struct {
		field string
		v     float64
	}{{"success_threshold", o.SuccessThreshold}, {"partial_threshold", o.PartialThreshold}, {"failure_budget", o.FailureBudget}} {
		if !(f.v >= 0 && f.v <= 1) {
			return badField(f.field, "must be between 0 and 1 (0.95 means 95%%), got %g", f.v)
		}
	}
	if o.MinItems < 0 {
		return badField("min_items", "must not be negative, got %d", o.MinItems)
	}
	succ, partial := o.SuccessThreshold, o.PartialThreshold
	succNote, partialNote := "", ""
	if succ == 0 {
		succ, succNote = redrive.DefaultSuccessThreshold, " (the default)"
	}
	if partial == 0 {
		partial, partialNote = redrive.DefaultPartialThreshold, " (the default)"
	}
	if partial > succ {
		return badField("partial_threshold", "%g%s must not exceed success_threshold %g%s", partial, partialNote, succ, succNote)
	}
	if err := o.Validate(); err != nil {
		// A rule the checks above do not know yet.
		return errors.New(userMessage(err))
	}
	return nil
}

// POST /api/v1/runs/{id}/items
func (s *server) addRunItems(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	var req addItemsRequest
	if err := s.decodeBodyMax(w, r, &req, s.opts.MaxSubmitBytes); err != nil {
		writeBad(w, err)
		return
	}
	if req.Run != "" {
		writeBad(w, badField("run", "is for POST /api/v1/pipelines/{name}/items; this run is named by the path"))
		return
	}
	idem, err := idempotencyKey(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	items, err := s.items(req.Items, idem)
	if err != nil {
		writeBad(w, err)
		return
	}
	run, err := s.store.GetRun(r.Context(), id)
	if err != nil {
		s.fail(w, r, "add items", err)
		return
	}
	ref, err := s.pipelineRef(run.Pipeline)
	if err != nil {
		writeError(w, http.StatusNotFound, "pipeline", fmt.Sprintf("run %d: %v", id, err))
		return
	}
	if err := s.callbacksSigned(ref.Name, items); err != nil {
		writeBad(w, err)
		return
	}
	rk, ok := s.lookUpKey(w, r, idem, canonicalRequest{Endpoint: "POST /api/v1/runs/{id}/items", Pipeline: ref.Name, RunID: run.ID}, items)
	if !ok {
		return
	}
	s.submit(w, r, run, false, ref, items, rk)
}

// POST /api/v1/pipelines/{name}/items: add items to the pipeline's run
// named in the body (DefaultSubmitRun when none), created when missing.
func (s *server) addPipelineItems(w http.ResponseWriter, r *http.Request) {
	ref, err := s.pipelineRef(r.PathValue("name"))
	if err != nil {
		writeError(w, http.StatusNotFound, "name", err.Error())
		return
	}
	var req addItemsRequest
	if err := s.decodeBodyMax(w, r, &req, s.opts.MaxSubmitBytes); err != nil {
		writeBad(w, err)
		return
	}
	idem, err := idempotencyKey(r)
	if err != nil {
		writeBad(w, err)
		return
	}
	if req.Run == "" {
		req.Run = DefaultSubmitRun
	}
	if len(req.Run) > MaxKeyBytes || !printable(req.Run) {
		writeBad(w, badField("run", "must be printable text of at most %d bytes", MaxKeyBytes))
		return
	}
	items, err := s.items(req.Items, idem)
	if err == nil {
		err = s.callbacksSigned(ref.Name, items)
	}
	if err != nil {
		writeBad(w, err)
		return
	}
	rk, ok := s.lookUpKey(w, r, idem, canonicalRequest{Endpoint: "POST /api/v1/pipelines/{name}/items", Pipeline: ref.Name, Run: req.Run}, items)
	if !ok {
		return
	}
	run, created, err := s.store.CreateRun(r.Context(), ref.Name, redrive.RunOptions{Name: req.Run}, s.opts.Now())
	if err != nil {
		s.fail(w, r, "add items", err)
		return
	}
	s.submit(w, r, run, created, ref, items, rk)
}

// GET /api/v1/pipelines: the pipelines that accept items here.
func (s *server) listPipelines(w http.ResponseWriter, r *http.Request) {
	if err := newQuery(r).err; err != nil {
		writeBad(w, err)
		return
	}
	ps := slices.Clone(s.opts.Pipelines)
	nonNil(&ps)
	writeJSON(w, http.StatusOK, listResponse[PipelineRef]{Data: ps})
}

// cancelItemResponse is the response of POST /api/v1/items/{id}/cancel.
type cancelItemResponse struct {
	Item redrive.Item `json:"item"`
}

// POST /api/v1/items/{id}/cancel: a pending item is canceled with the
// reason; an item in any other state answers 409 and is left alone.
func (s *server) cancelItem(w http.ResponseWriter, r *http.Request) {
	id, reason, ok := s.cancelArgs(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	it, err := s.store.GetItem(ctx, id)
	if err != nil {
		s.fail(w, r, "cancel item", err)
		return
	}
	if it.State == redrive.StatePending {
		n, err := s.store.CancelPending(ctx, redrive.ItemFilter{IDs: []int64{id}, States: []redrive.State{redrive.StatePending}},
			redrive.Reason{Class: redrive.ClassCanceled, Error: reason, At: s.opts.Now()})
		if err != nil {
			s.fail(w, r, "cancel item", err)
			return
		}
		if it, err = s.store.GetItem(ctx, id); err != nil {
			s.fail(w, r, "cancel item", err)
			return
		}
		if n == 1 {
			s.opts.Logger.Info("web: item canceled", "item", id, "run", it.RunID)
			writeJSON(w, http.StatusOK, cancelItemResponse{Item: itemSummary(it)})
			return
		}
	}
	msg := fmt.Sprintf("item %d is %s, not pending", id, it.State)
	if it.State == redrive.StateRunning {
		msg += ": an attempt is under way; cancel its run, or retry once the attempt ends"
	}
	writeError(w, http.StatusConflict, "", msg)
}

// withTraceHeaders gives items the W3C Trace Context of the request's
// traceparent and tracestate headers, so that their attempts' spans are
// children of the caller's span (docs/tracing.md). A malformed traceparent
// is ignored, as W3C Trace Context asks. The headers are not part of the
// request an Idempotency-Key binds: a retry with another traceparent is
// the same submit.
func withTraceHeaders(r *http.Request, items []redrive.NewItem) {
	tp, ts := redrive.ParseTraceHeaders(r.Header.Get("Traceparent"), r.Header.Get("Tracestate"))
	if tp == "" {
		return
	}
	for i := range items {
		items[i].TraceParent, items[i].TraceState = tp, ts
	}
}

// newItem builds the engine's item from a validated submitted one.
func newItem(it submitItem, orderAt time.Time) redrive.NewItem {
	return redrive.NewItem{Key: it.Key, Payload: bytes.TrimSpace(it.Input), Priority: it.Priority, OrderAt: orderAt,
		Callback: it.Callback}
}
