package web

import (
	"net/http"

	"github.com/redrive/redrive"
)

// consoleRoutes lists the operators' console endpoints.
func (s *server) consoleRoutes() []route {
	return append([]route{
		{"GET /api/v1/errors", ScopeRead, s.errorGroups},
		{"GET /api/v1/count", ScopeRead, s.countItems},
		{"GET /api/v1/audit", ScopeRead, s.listAudit},
	}, s.viewRoutes()...)
}

// countResponse is the response of GET /api/v1/count.
type countResponse struct {
	// Total is how many items the filter selects, every page included.
	Total int `json:"total"`
}

// GET /api/v1/count?run=&pipeline=&stage=&key=&state=&class=&error_contains=&fingerprint=&action=&since=&until=:
// how many items the filter selects, for the totals of a list.
func (s *server) countItems(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "run", "pipeline", "stage", "key", "state", "class", "error_contains", "fingerprint", "action", "since", "until")
	f := s.itemFilter(q)
	f.Limit = 0
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	if err := redrive.CheckFilter(r.Context(), s.store, f); err != nil {
		s.filterFail(w, r, "count", f, err)
		return
	}
	n, err := s.store.Count(r.Context(), f)
	if err != nil {
		s.fail(w, r, "count", err)
		return
	}
	writeJSON(w, http.StatusOK, countResponse{Total: n})
}

// GET /api/v1/errors?run=&pipeline=&stage=&key=&state=&class=&error_contains=&fingerprint=&action=&since=&until=:
// the failures the filter selects grouped by cause (redrive.ErrorGroup),
// ranked by deaths. state is dead (the default), canceled or both.
func (s *server) errorGroups(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "run", "pipeline", "stage", "key", "state", "class", "error_contains", "fingerprint", "action", "since", "until")
	f := s.itemFilter(q)
	f.States = dlqStates(q, f.States)
	f.Limit = 0
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	if err := redrive.CheckFilter(r.Context(), s.store, f); err != nil {
		s.filterFail(w, r, "error groups", f, err)
		return
	}
	groups, err := redrive.ErrorGroups(r.Context(), s.store, f)
	if err != nil {
		s.fail(w, r, "error groups", err)
		return
	}
	nonNil(&groups)
	writeJSON(w, http.StatusOK, listResponse[redrive.ErrorGroup]{Data: groups})
}
