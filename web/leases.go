package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
)

// The endpoints of external workers (docs/workers.md): a worker in any
// language leases items of an External stage, heartbeats while it works,
// and reports each result; the engine applies the stage's policy as to a Go
// handler's. The handlers only translate JSON: redrive.Client's
// LeaseExternal, SettleExternal, HeartbeatExternal and ReleaseExternal do
// the work, and stay testable without HTTP.

// leaseRoutes lists the endpoints of external workers.
func (s *server) leaseRoutes() []route {
	return []route{
		{"POST /api/v1/leases", ScopeWork, s.leaseItems},
		{"POST /api/v1/leases/heartbeat", ScopeWork, s.heartbeatLeases},
		{"POST /api/v1/leases/complete", ScopeWork, s.completeLeases},
		{"POST /api/v1/leases/fail", ScopeWork, s.failLeases},
		{"POST /api/v1/leases/release", ScopeWork, s.releaseLeases},
	}
}

// workClient returns the started client that hands out external work, or
// answers 503.
func (s *server) workClient(w http.ResponseWriter) *redrive.Client {
	var c *redrive.Client
	if s.opts.Work != nil {
		c = s.opts.Work()
	}
	if c == nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "", "no external stages are worked here now: the server runs no pipeline with an external stage (redrive serve --pipeline FILE), or is reloading")
	}
	return c
}

// leaseFail answers an error of the engine's external work.
func (s *server) leaseFail(w http.ResponseWriter, r *http.Request, op string, err error) {
	var fe *redrive.ExternalRequestError
	switch {
	case errors.As(err, &fe):
		writeError(w, http.StatusBadRequest, fe.Field, fe.Error())
	case errors.Is(err, redrive.ErrUnknownPipeline):
		writeError(w, http.StatusNotFound, "pipeline", err.Error())
	case errors.Is(err, redrive.ErrNotExternal):
		writeError(w, http.StatusBadRequest, "stage", err.Error())
	case errors.Is(err, redrive.ErrNotStarted):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "", "the server's workers are stopping or reloading: try again")
	default:
		s.fail(w, r, op, err)
	}
}

// seconds reads a duration given in seconds.
func seconds(field string, v *float64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0 || *v > 1e6 {
		return 0, badField(field, "must be a number of seconds from 0")
	}
	return time.Duration(*v * float64(time.Second)), nil
}

// leaseRequest is the body of POST /api/v1/leases.
type leaseRequest struct {
	Pipeline string   `json:"pipeline"`
	Stage    string   `json:"stage"`
	Worker   string   `json:"worker"`
	Host     string   `json:"host"`
	PID      int      `json:"pid"`
	Max      int      `json:"max"`
	Wait     *float64 `json:"wait"`
	Lease    *float64 `json:"lease"`
}

// leasedItem is one item of a lease response.
type leasedItem struct {
	ID       int64  `json:"id"`
	Token    int64  `json:"token"`
	Key      string `json:"key,omitempty"`
	Run      int64  `json:"run"`
	Pipeline string `json:"pipeline"`
	Stage    string `json:"stage"`
	Attempt  int    `json:"attempt"`
	// Input is the stage's input as the API shows item bytes: the JSON
	// value when it is JSON, else a base64 string, as InputEncoding says.
	Input         json.RawMessage `json:"input"`
	InputEncoding string          `json:"input_encoding"`
	ExpiresAt     time.Time       `json:"expires_at"`
	// Timeout is the stage's timeout in seconds; absent for none.
	Timeout float64 `json:"timeout,omitempty"`
	// Traceparent and Tracestate are the W3C Trace Context the worker's
	// spans take as parent (redrive.ExternalLease.TraceParent); absent
	// when the item has none.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// leaseResponse is the response of POST /api/v1/leases.
type leaseResponse struct {
	Leases []leasedItem `json:"leases"`
}

// POST /api/v1/leases: hand out up to max due items of an external stage,
// waiting up to wait seconds for one.
func (s *server) leaseItems(w http.ResponseWriter, r *http.Request) {
	var req leaseRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeBad(w, err)
		return
	}
	wait, err := seconds("wait", req.Wait)
	if err != nil {
		writeBad(w, err)
		return
	}
	lease, err := seconds("lease", req.Lease)
	if err != nil {
		writeBad(w, err)
		return
	}
	switch {
	case req.Pipeline == "":
		writeError(w, http.StatusBadRequest, "pipeline", "pipeline: required")
		return
	case req.Stage == "":
		writeError(w, http.StatusBadRequest, "stage", "stage: required")
		return
	}
	c := s.workClient(w)
	if c == nil {
		return
	}
	ls, err := c.LeaseExternal(r.Context(), redrive.ExternalLeaseRequest{Pipeline: req.Pipeline, Stage: req.Stage, Worker: req.Worker,
		Host: req.Host, PID: req.PID, Max: req.Max, Wait: wait, Lease: lease})
	if err != nil {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			return // the worker went away
		}
		s.leaseFail(w, r, "lease", err)
		return
	}
	if r.Context().Err() != nil && len(ls) > 0 {
		// The worker went away while its items were handed out (it stops):
		// they go back unattempted rather than wait for their leases.
		refs := make([]redrive.LeaseRef, len(ls))
		for i, l := range ls {
			refs[i] = l.Ref()
		}
		if err := c.ReleaseExternal(context.WithoutCancel(r.Context()), req.Worker, refs); err != nil {
			s.opts.Logger.Warn("web: releasing the leases of a worker that went away", "worker", req.Worker, "error", err)
		}
		return
	}
	resp := leaseResponse{Leases: make([]leasedItem, len(ls))}
	for i, l := range ls {
		it := l.Item
		li := leasedItem{ID: it.ID, Token: l.Token, Key: it.Key, Run: it.RunID, Pipeline: it.Pipeline, Stage: it.Stage,
			Attempt: l.Attempt, ExpiresAt: l.ExpiresAt.UTC(), Timeout: l.Timeout.Seconds(),
			Traceparent: l.TraceParent, Tracestate: l.TraceState}
		if len(it.Payload) == 0 {
			li.Input, li.InputEncoding = json.RawMessage("null"), redrive.EncodingJSON
		} else {
			li.Input, li.InputEncoding = redrive.EncodeBytes(it.Payload)
		}
		resp.Leases[i] = li
	}
	writeJSON(w, http.StatusOK, resp)
}

// leaseRef names a lease in a request.
type leaseRef struct {
	ID    int64 `json:"id"`
	Token int64 `json:"token"`
}

func refs(field string, ls []leaseRef) ([]redrive.LeaseRef, error) {
	out := make([]redrive.LeaseRef, len(ls))
	for i, l := range ls {
		if l.ID <= 0 {
			return nil, badField(field+"["+strconv.Itoa(i)+"].id", "must be a positive item ID")
		}
		out[i] = redrive.LeaseRef{ItemID: l.ID, Token: l.Token}
	}
	return out, nil
}

// settledResult is one lease's answer in the responses of heartbeat,
// complete, fail and release.
type settledResult struct {
	ID      int64 `json:"id"`
	Applied bool  `json:"applied"`
	// Outcome and State say what became of an applied result; RetryIn is
	// the wait in seconds before the next attempt it scheduled.
	Outcome redrive.Outcome `json:"outcome,omitempty"`
	State   redrive.State   `json:"state,omitempty"`
	RetryIn float64         `json:"retry_in,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// settledResponse is the response of heartbeat, complete and fail: 200
// when every lease applied, 409 (with Error) when any did not.
type settledResponse struct {
	Results []settledResult `json:"results"`
	// ExpiresAt is when the heartbeated leases now expire.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Error     string     `json:"error,omitempty"`
}

func writeSettled(w http.ResponseWriter, out []redrive.ExternalSettled, expires *time.Time, what string) {
	resp := settledResponse{Results: make([]settledResult, len(out)), ExpiresAt: expires}
	refused := 0
	for i, o := range out {
		resp.Results[i] = settledResult{ID: o.ItemID, Applied: o.Applied, Outcome: o.Outcome, State: o.State, RetryIn: o.Delay.Seconds(), Error: o.Error}
		if !o.Applied {
			refused++
		}
	}
	code := http.StatusOK
	if refused > 0 {
		code = http.StatusConflict
		resp.Error = fmt.Sprintf("%d of %d %s not applied: the lease expired or was superseded (see results)", refused, len(out), what)
	}
	writeJSON(w, code, resp)
}

// heartbeatRequest is the body of POST /api/v1/leases/heartbeat.
type heartbeatRequest struct {
	Worker string     `json:"worker"`
	Leases []leaseRef `json:"leases"`
	Lease  *float64   `json:"lease"`
}

// POST /api/v1/leases/heartbeat: extend leases while their items are
// worked.
func (s *server) heartbeatLeases(w http.ResponseWriter, r *http.Request) {
	var req heartbeatRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeBad(w, err)
		return
	}
	lease, err := seconds("lease", req.Lease)
	if err != nil {
		writeBad(w, err)
		return
	}
	rs, err := refs("leases", req.Leases)
	if err != nil {
		writeBad(w, err)
		return
	}
	c := s.workClient(w)
	if c == nil {
		return
	}
	until, out, err := c.HeartbeatExternal(r.Context(), req.Worker, rs, lease)
	if err != nil {
		s.leaseFail(w, r, "heartbeat", err)
		return
	}
	until = until.UTC()
	writeSettled(w, out, &until, "leases were")
}

// completion is one success in POST /api/v1/leases/complete.
type completion struct {
	ID    int64 `json:"id"`
	Token int64 `json:"token"`
	// Output is the stage's output, any JSON value (null when absent), or
	// with OutputEncoding "base64" a base64 string of bytes that are not
	// JSON.
	Output         json.RawMessage `json:"output"`
	OutputEncoding string          `json:"output_encoding"`
}

// completeRequest is the body of POST /api/v1/leases/complete.
type completeRequest struct {
	Worker  string       `json:"worker"`
	Results []completion `json:"results"`
}

// POST /api/v1/leases/complete: record successes, with their outputs.
func (s *server) completeLeases(w http.ResponseWriter, r *http.Request) {
	var req completeRequest
	if err := s.decodeBodyMax(w, r, &req, s.opts.MaxSubmitBytes); err != nil {
		writeBad(w, err)
		return
	}
	rs := make([]redrive.ExternalResult, len(req.Results))
	for i, c := range req.Results {
		if c.ID <= 0 {
			writeError(w, http.StatusBadRequest, "results["+strconv.Itoa(i)+"].id", "results["+strconv.Itoa(i)+"].id: must be a positive item ID")
			return
		}
		field := "results[" + strconv.Itoa(i) + "]"
		var out []byte
		switch c.OutputEncoding {
		case "", redrive.EncodingJSON:
			out = []byte(c.Output)
			if len(out) == 0 {
				out = []byte("null")
			}
		case redrive.EncodingBase64:
			b, err := redrive.DecodeBytes(c.Output, redrive.EncodingBase64)
			if err != nil {
				writeError(w, http.StatusBadRequest, field+".output", field+".output: not a base64 string")
				return
			}
			out = append([]byte{}, b...)
		default:
			writeError(w, http.StatusBadRequest, field+".output_encoding", fmt.Sprintf("%s.output_encoding: %q: want json or base64", field, c.OutputEncoding))
			return
		}
		rs[i] = redrive.ExternalResult{Lease: redrive.LeaseRef{ItemID: c.ID, Token: c.Token}, Output: out}
	}
	s.settle(w, r, req.Worker, rs, "results")
}

// failure is one failure in POST /api/v1/leases/fail.
type failure struct {
	ID    int64  `json:"id"`
	Token int64  `json:"token"`
	Class string `json:"class"`
	Error string `json:"error"`
	// RetryAfter is how long the dependency asked to wait, in seconds.
	RetryAfter *float64 `json:"retry_after"`
}

// failRequest is the body of POST /api/v1/leases/fail.
type failRequest struct {
	Worker   string    `json:"worker"`
	Failures []failure `json:"failures"`
}

// maxFailureMessage bounds the message of a failure a worker reports.
const maxFailureMessage = 4096

// POST /api/v1/leases/fail: record failures, each with its class.
func (s *server) failLeases(w http.ResponseWriter, r *http.Request) {
	var req failRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeBad(w, err)
		return
	}
	rs := make([]redrive.ExternalResult, len(req.Failures))
	for i, f := range req.Failures {
		field := "failures[" + strconv.Itoa(i) + "]"
		if f.ID <= 0 {
			writeError(w, http.StatusBadRequest, field+".id", field+".id: must be a positive item ID")
			return
		}
		class, err := retry.ParseClass(f.Class)
		if err != nil || f.Class == "" {
			writeError(w, http.StatusBadRequest, field+".class", fmt.Sprintf("%s.class: %q: want retryable, final or rate_limited", field, f.Class))
			return
		}
		after, err := seconds(field+".retry_after", f.RetryAfter)
		if err != nil {
			writeBad(w, err)
			return
		}
		if after > 0 && class != retry.ClassRateLimited {
			writeError(w, http.StatusBadRequest, field+".retry_after", field+".retry_after: only a rate_limited failure waits for a Retry-After")
			return
		}
		msg := f.Error
		if len(msg) > maxFailureMessage {
			msg = msg[:maxFailureMessage] + "…"
		}
		rs[i] = redrive.ExternalResult{Lease: redrive.LeaseRef{ItemID: f.ID, Token: f.Token},
			Failure: &redrive.ExternalFailure{Class: class, Error: msg, RetryAfter: after}}
	}
	s.settle(w, r, req.Worker, rs, "failures")
}

func (s *server) settle(w http.ResponseWriter, r *http.Request, worker string, rs []redrive.ExternalResult, field string) {
	c := s.workClient(w)
	if c == nil {
		return
	}
	out, err := c.SettleExternal(r.Context(), worker, rs)
	if err != nil {
		var fe *redrive.ExternalRequestError
		if errors.As(err, &fe) && len(fe.Field) > 0 && fe.Field[0] == '[' {
			fe.Field = field + fe.Field // "[3].class" names an entry of the body's list
		} else if errors.As(err, &fe) && fe.Field == "results" {
			fe.Field = field
		}
		s.leaseFail(w, r, "record results", err)
		return
	}
	writeSettled(w, out, nil, field+" were")
}

// releaseRequest is the body of POST /api/v1/leases/release.
type releaseRequest struct {
	Worker string     `json:"worker"`
	Leases []leaseRef `json:"leases"`
	// Leaving removes the worker from the workers view: it stops.
	Leaving bool `json:"leaving"`
}

// releaseResponse is the response of POST /api/v1/leases/release.
type releaseResponse struct {
	// Released counts the leases named; those no longer current were
	// left alone.
	Released int `json:"released"`
}

// POST /api/v1/leases/release: give leased items back unworked, with no
// attempt charged.
func (s *server) releaseLeases(w http.ResponseWriter, r *http.Request) {
	var req releaseRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeBad(w, err)
		return
	}
	rs, err := refs("leases", req.Leases)
	if err != nil {
		writeBad(w, err)
		return
	}
	c := s.workClient(w)
	if c == nil {
		return
	}
	if len(rs) > 0 {
		if err := c.ReleaseExternal(r.Context(), req.Worker, rs); err != nil {
			s.leaseFail(w, r, "release", err)
			return
		}
	}
	if req.Leaving && req.Worker != "" {
		if _, err := c.RemoveExternalWorker(r.Context(), req.Worker); err != nil {
			s.leaseFail(w, r, "release", err)
			return
		}
	}
	writeJSON(w, http.StatusOK, releaseResponse{Released: len(rs)})
}
