package web

import (
	"net/http"
	"strings"

	"github.com/redrive/redrive"
)

// pendingRoutes lists the actions on pending items.
func (s *server) pendingRoutes() []route {
	return []route{
		{"POST /api/v1/items/cancel", ScopeAdmin, s.cancelItems},
		{"POST /api/v1/items/retry-now", ScopeAdmin, s.retryNow},
	}
}

// cancelItemsRequest is the body of POST /api/v1/items/cancel.
type cancelItemsRequest struct {
	filterBody
	DryRun bool `json:"dry_run"`
	// Reason is recorded on the canceled items. Default
	// DefaultCancelReason.
	Reason string `json:"reason"`
	// All must be true to cancel without any filter field: every pending
	// item of every run.
	All bool `json:"all"`
}

// retryNowRequest is the body of POST /api/v1/items/retry-now.
type retryNowRequest struct {
	filterBody
	DryRun bool `json:"dry_run"`
}

// POST /api/v1/items/cancel: the pending items the filter selects
// (waiting on a backoff or due) are canceled with the reason. Running
// items finish their attempt and are left alone.
func (s *server) cancelItems(w http.ResponseWriter, r *http.Request) {
	var req cancelItemsRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeBad(w, err)
		return
	}
	f, err := req.filter(redrive.StatePending)
	reason := strings.TrimSpace(req.Reason)
	if reason == "" {
		reason = DefaultCancelReason
	}
	switch {
	case err != nil:
	case len(reason) > 1000:
		err = badField("reason", "longer than 1000 bytes")
	case req.empty() && !req.All && !req.DryRun:
		err = badField("all", `a cancel without any filter cancels every pending item: set "all": true to mean it`)
	}
	if err != nil {
		writeBad(w, err)
		return
	}
	f.States = []redrive.State{redrive.StatePending}
	if f, err = s.checkActionFilter(w, r, "cancel", f); err != nil {
		return
	}
	if req.DryRun {
		s.dryCount(w, r, "cancel", f)
		return
	}
	act := s.beginAudit(r, "cancel", f, f, "reason: "+reason)
	n, err := s.store.CancelPending(r.Context(), f, redrive.Reason{Class: redrive.ClassCanceled, Error: reason, At: s.opts.Now()})
	warning := act.end(s, r, n, err)
	if err != nil {
		s.fail(w, r, "cancel", err)
		return
	}
	s.opts.Logger.Info("web: cancel pending", "count", n, "run", f.RunID, "pipeline", f.Pipeline, "stage", f.Stage)
	writeJSON(w, http.StatusOK, dlqResponse{Count: n, Warning: warning})
}

// POST /api/v1/items/retry-now: the pending items the filter selects that
// wait on a backoff or a rate limit become due now, without spending or
// resetting an attempt. Items already due are not counted.
func (s *server) retryNow(w http.ResponseWriter, r *http.Request) {
	var req retryNowRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		writeBad(w, err)
		return
	}
	f, err := req.filter(redrive.StatePending)
	if err != nil {
		writeBad(w, err)
		return
	}
	now := s.opts.Now()
	f.States = []redrive.State{redrive.StatePending}
	if f, err = s.checkActionFilter(w, r, "retry now", f); err != nil {
		return
	}
	f.DueAfter = now
	if req.DryRun {
		s.dryCount(w, r, "retry now", f)
		return
	}
	act := s.beginAudit(r, "retry_now", f, f, "")
	n, err := s.store.RetryNow(r.Context(), f, now)
	warning := act.end(s, r, n, err)
	if err != nil {
		s.fail(w, r, "retry now", err)
		return
	}
	s.opts.Logger.Info("web: retry now", "count", n, "run", f.RunID, "pipeline", f.Pipeline, "stage", f.Stage)
	if n > 0 {
		warning = joinWarnings(s.unservedWarning(r, f), warning)
	}
	writeJSON(w, http.StatusOK, dlqResponse{Count: n, Warning: warning})
}

// checkActionFilter answers a filter that names what does not exist, and
// otherwise returns the filter to act with (its key resolved, see
// redrive.ResolveKey); a non-nil error means the answer was written.
func (s *server) checkActionFilter(w http.ResponseWriter, r *http.Request, op string, f redrive.ItemFilter) (redrive.ItemFilter, error) {
	rf, err := redrive.ResolveFilter(r.Context(), s.store, f)
	if err != nil {
		s.filterFail(w, r, op, f, err)
		return f, err
	}
	return rf, nil
}

// dryCount answers a dry run with how many items f selects.
func (s *server) dryCount(w http.ResponseWriter, r *http.Request, op string, f redrive.ItemFilter) {
	n, err := s.store.Count(r.Context(), f)
	if err != nil {
		s.fail(w, r, op, err)
		return
	}
	writeJSON(w, http.StatusOK, dlqResponse{Count: n, DryRun: true})
}
