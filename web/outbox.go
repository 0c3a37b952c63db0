package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/redrive/redrive"
)

// cursorOutbox marks cursors of the outbox list.
const cursorOutbox = "o"

// outbox returns the store's outbox, or answers 404 and reports false when
// the store keeps none.
func (s *server) outbox(w http.ResponseWriter) (redrive.Outbox, bool) {
	o, ok := s.store.(redrive.Outbox)
	if !ok {
		writeError(w, http.StatusNotFound, "", "this store keeps no outbox: webhooks and callbacks need the SQLite or PostgreSQL store")
	}
	return o, ok
}

// outboxListResponse is the response of GET /api/v1/outbox.
type outboxListResponse struct {
	Data []redrive.Notification `json:"data"`
	// NextCursor fetches the next page; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
	// Totals counts the notifications of the pipeline and event filters
	// by status, whatever the state filter and the page.
	Totals redrive.NotificationCounts `json:"totals"`
}

// notificationStatuses reads a comma-separated list of statuses.
func notificationStatuses(field, v string) ([]redrive.NotificationStatus, error) {
	if v == "" {
		return nil, nil
	}
	var out []redrive.NotificationStatus
	for p := range strings.SplitSeq(v, ",") {
		st := redrive.NotificationStatus(strings.TrimSpace(p))
		switch st {
		case redrive.NotificationPending, redrive.NotificationDelivered, redrive.NotificationDead:
		default:
			return nil, badField(field, "unknown status %q (pending, delivered or dead)", st)
		}
		out = append(out, st)
	}
	return out, nil
}

// checkEvent refuses an event that is not one of redrive's.
func checkEvent(field, e string) error {
	if e != "" && !redrive.ValidEvent(e) {
		return badField(field, "unknown event %q (item.dead, item.succeeded, item.canceled or run.finished)", e)
	}
	return nil
}

// redactCallback hides a callback URL's query, which often carries a
// receiver's token, from readers of the list.
func redactCallback(n *redrive.Notification) {
	if n.Callback == "" {
		return
	}
	u, err := url.Parse(n.Callback)
	if err != nil {
		n.Callback = "(unparsable URL)"
		return
	}
	if u.RawQuery != "" {
		u.RawQuery = "redacted"
	}
	n.Callback = u.String()
}

// GET /api/v1/outbox?state=&pipeline=&event=&limit=&cursor=: notifications
// in ID order, with totals by status.
func (s *server) listOutbox(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "state", "pipeline", "event", "limit", "cursor")
	f := redrive.NotificationFilter{Pipeline: q.str("pipeline"), Event: q.str("event"), Limit: s.limit(q)}
	var err error
	if f.Statuses, err = notificationStatuses("state", q.str("state")); err != nil {
		q.fail(err)
	}
	q.fail(checkEvent("event", f.Event))
	if f.AfterID, err = decodeCursor(cursorOutbox, q.str("cursor")); err != nil {
		q.fail(err)
	}
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	o, ok := s.outbox(w)
	if !ok {
		return
	}
	limit := f.Limit
	f.Limit = limit + 1
	ns, err := o.ListNotifications(r.Context(), f)
	if err != nil {
		s.fail(w, r, "list outbox", err)
		return
	}
	resp := outboxListResponse{Data: make([]redrive.Notification, 0, min(len(ns), limit))}
	for i, n := range ns {
		if i == limit {
			resp.NextCursor = encodeCursor(cursorOutbox, ns[limit-1].ID)
			break
		}
		redactCallback(&n)
		resp.Data = append(resp.Data, n)
	}
	if resp.Totals, err = o.CountNotifications(r.Context(), f); err != nil {
		s.fail(w, r, "list outbox", err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// outboxRedriveRequest is the body of POST /api/v1/outbox/redrive.
type outboxRedriveRequest struct {
	Pipeline string `json:"pipeline"`
	Event    string `json:"event"`
	// States may only name dead, the one status that is redriven.
	States []redrive.NotificationStatus `json:"states"`
	// Limit caps how many are redriven, oldest first; 0: all.
	Limit  int  `json:"limit"`
	DryRun bool `json:"dry_run"`
}

// POST /api/v1/outbox/redrive: dead notifications selected by the body
// are due again at once, with a fresh attempt count and their delivery
// IDs; dry_run counts them instead.
func (s *server) redriveOutbox(w http.ResponseWriter, r *http.Request) {
	var req outboxRedriveRequest
	err := s.decodeBody(w, r, &req)
	if err == nil {
		err = checkEvent("event", req.Event)
	}
	for _, st := range req.States {
		if err == nil && st != redrive.NotificationDead {
			err = badField("states", "only dead notifications are redriven, not %q", st)
		}
	}
	if err == nil && req.Limit < 0 {
		err = badField("limit", "must not be negative")
	}
	if err != nil {
		writeBad(w, err)
		return
	}
	o, ok := s.outbox(w)
	if !ok {
		return
	}
	f := redrive.NotificationFilter{Pipeline: req.Pipeline, Event: req.Event, Limit: req.Limit,
		Statuses: []redrive.NotificationStatus{redrive.NotificationDead}}
	var n int
	if req.DryRun {
		var c redrive.NotificationCounts
		c, err = o.CountNotifications(r.Context(), f)
		n = c.Dead
		if req.Limit > 0 {
			n = min(n, req.Limit)
		}
	} else {
		n, err = o.RedriveNotifications(r.Context(), f, s.opts.Now())
	}
	if err != nil {
		s.fail(w, r, "redrive outbox", err)
		return
	}
	resp := dlqResponse{Count: n, DryRun: req.DryRun}
	if !req.DryRun {
		s.opts.Logger.Info("web: outbox redrive", "count", n, "pipeline", f.Pipeline, "event", f.Event)
		if n > 0 {
			detail := "dead notifications"
			if f.Event != "" {
				detail = fmt.Sprintf("dead %s notifications", f.Event)
			}
			resp.Warning = s.audit(r, "outbox_redrive", redrive.ItemFilter{Pipeline: f.Pipeline, Limit: f.Limit}, n, detail)
		}
	}
	writeJSON(w, http.StatusOK, resp)
}
