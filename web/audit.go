package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive"
)

// cursorAudit marks cursors of the audit log.
const cursorAudit = "a"

// actorDefault is the actor recorded for the single token of
// Options.Token, which has no name of its own.
const actorDefault = "default"

// actor names who made request r: the person the trusted header of
// Options.ActorHeader names, else the name of the token it authenticated
// with ("default" for Options.Token). require has refused a header value
// that cannot be a name.
func (s *server) actor(r *http.Request) string {
	if p, err := s.proxyActor(r); err == nil && p != "" {
		return p
	}
	if n := tokenName(r); n != "" {
		return s.tokenLabel(n)
	}
	return actorDefault
}

// FilterQuery writes f as the URL query the API and the console read
// (run=3&stage=fetch), as the audit log records the filter of an action:
// the command line records its actions in the same form.
func FilterQuery(f redrive.ItemFilter) string {
	v := url.Values{}
	if f.RunID != 0 {
		v.Set("run", strconv.FormatInt(f.RunID, 10))
	}
	for k, s := range map[string]string{"pipeline": f.Pipeline, "stage": f.Stage, "key": f.Key, "class": f.Class, "error_contains": f.ErrorContains,
		"fingerprint": f.Fingerprint} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if len(f.States) > 0 {
		ss := make([]string, len(f.States))
		for i, st := range f.States {
			ss[i] = string(st)
		}
		v.Set("state", strings.Join(ss, ","))
	}
	if f.ActionID != 0 {
		v.Set("action", strconv.FormatInt(f.ActionID, 10))
	}
	if len(f.IDs) > 0 {
		ids := make([]string, len(f.IDs))
		for i, id := range f.IDs {
			ids[i] = strconv.FormatInt(id, 10)
		}
		v.Set("ids", strings.Join(ids, ","))
	}
	if !f.Since.IsZero() {
		v.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		v.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	if f.Limit > 0 {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	return v.Encode()
}

// audit records an action that changed items, when it is done and no
// item needs marking (a purge: its items are gone). The action is done, so
// a failure to record it is logged and returned as a warning, not an
// error.
func (s *server) audit(r *http.Request, kind string, f redrive.ItemFilter, n int, detail string) string {
	a := redrive.AuditAction{At: s.opts.Now().UTC(), Actor: s.actor(r), Kind: kind, Filter: FilterQuery(f), Count: n, Detail: detail}
	if _, err := s.store.RecordAction(r.Context(), a); err != nil {
		s.opts.Logger.Error("web: record action in the audit log", "kind", kind, "count", n, "error", err)
		return auditWarning
	}
	return ""
}

// auditWarning is the warning of an action that could not be recorded.
const auditWarning = "the action was done but could not be recorded in the audit log"

// auditedAction is an action recorded in the audit log before it runs, so
// that the items it is about to change can be linked to it while the
// filter still selects them (a redrive or a cancel changes their state).
type auditedAction struct {
	id     int64
	kind   string
	detail string
	failed bool // recording failed; the action runs anyway
}

// beginAudit records an action of kind on f, with detail, and links the
// items mark selects to it. Nothing is recorded when mark selects no
// item: the action has nothing to change.
func (s *server) beginAudit(r *http.Request, kind string, f, mark redrive.ItemFilter, detail string) *auditedAction {
	ctx := r.Context()
	n, err := s.store.Count(ctx, mark)
	if err == nil && n == 0 {
		return nil
	}
	a := &auditedAction{kind: kind, detail: detail}
	if err == nil {
		a.id, err = s.store.RecordAction(ctx, redrive.AuditAction{At: s.opts.Now().UTC(), Actor: s.actor(r), Kind: kind,
			Filter: FilterQuery(f), Count: n, Detail: detail})
	}
	if err == nil {
		_, err = s.store.MarkItems(ctx, a.id, mark)
	}
	if err != nil {
		s.opts.Logger.Error("web: record action in the audit log", "kind", kind, "error", err)
		a.failed = true
	}
	return a
}

// end sets the count of a recorded action once it ran (a failed action is
// recorded as such, with no count) and returns a warning when the audit
// log could not record it.
func (a *auditedAction) end(s *server, r *http.Request, n int, actErr error) string {
	if a == nil {
		return ""
	}
	if a.failed {
		return auditWarning
	}
	detail := a.detail
	if actErr != nil {
		n, detail = 0, "failed"
		if a.detail != "" {
			detail += ": " + a.detail
		}
	}
	// The request's context may be gone with its client; the action is
	// done and its record must say so.
	ctx := context.WithoutCancel(r.Context())
	if err := s.store.UpdateAction(ctx, a.id, n, detail); err != nil {
		s.opts.Logger.Error("web: record action in the audit log", "kind", a.kind, "count", n, "error", err)
		return auditWarning
	}
	return ""
}

// RedriveDetail describes how a redrive was done, as the audit log
// records it ("rate 5/s from stage fetch"); "" for all at once from the
// stage that stopped the items.
func RedriveDetail(rate float64, fromStage string) string {
	var parts []string
	if rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %g/s", rate))
	}
	if fromStage != "" {
		parts = append(parts, "from stage "+fromStage)
	}
	return strings.Join(parts, " ")
}

// GET /api/v1/audit?limit=&cursor=: the audit log, newest first.
func (s *server) listAudit(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "limit", "cursor")
	limit := s.limit(q)
	before, err := decodeCursor(cursorAudit, q.str("cursor"))
	if err != nil {
		q.fail(err)
	}
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	acts, err := s.store.ListActions(r.Context(), redrive.AuditFilter{BeforeID: before, Limit: limit + 1})
	if err != nil {
		s.fail(w, r, "audit log", err)
		return
	}
	resp := listResponse[redrive.AuditAction]{Data: make([]redrive.AuditAction, 0, min(len(acts), limit))}
	for i, a := range acts {
		if i == limit {
			resp.NextCursor = encodeCursor(cursorAudit, acts[limit-1].ID)
			break
		}
		resp.Data = append(resp.Data, a)
	}
	writeJSON(w, http.StatusOK, resp)
}

// joinWarnings joins the non-empty warnings into one sentence list.
func joinWarnings(ws ...string) string {
	var out []string
	for _, w := range ws {
		if w != "" {
			out = append(out, w)
		}
	}
	return strings.Join(out, "; ")
}
