package web_test

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

// whoami is the response of GET /api/v1/whoami.
type whoami struct {
	ReadsProtected bool        `json:"reads_protected"`
	Configured     []web.Scope `json:"configured"`
	Token          *struct {
		Name   string      `json:"name"`
		Scopes []web.Scope `json:"scopes"`
	} `json:"token"`
	Actor       string `json:"actor"`
	ActorHeader string `json:"actor_header"`
}

// TestWhoami: without a token it says whether reads are protected; with
// one, its name and scopes (never the secret), so that the console asks
// for a token only when it needs one; an unknown token is 401.
func TestWhoami(t *testing.T) {
	f := newFixture(t, scopedOptions())
	var w whoami
	f.get(t, "/api/v1/whoami").json(t, &w)
	if !w.ReadsProtected || w.Token != nil || w.Actor != "" || !slices.Equal(w.Configured, []web.Scope{web.ScopeRead, web.ScopeSubmit, web.ScopeAdmin}) {
		t.Errorf("whoami without a token = %+v", w)
	}
	r := f.send(t, "GET", "/api/v1/whoami", submitToken, "")
	r.json(t, &w)
	if w.Token == nil || w.Token.Name != "app" || !slices.Equal(w.Token.Scopes, []web.Scope{web.ScopeRead, web.ScopeSubmit}) || w.Actor != "app" {
		t.Errorf("whoami with the app token = %+v", w)
	}
	if strings.Contains(string(r.body), submitToken) {
		t.Errorf("whoami echoes the secret: %s", r.body)
	}
	f.send(t, "GET", "/api/v1/whoami", "no-such-token-0123456789", "").apiErr(t, http.StatusUnauthorized)

	// Reads open: nothing is needed to read.
	open := newFixture(t, web.Options{Token: token})
	w = whoami{}
	open.get(t, "/api/v1/whoami").json(t, &w)
	if w.ReadsProtected || !slices.Equal(w.Configured, []web.Scope{web.ScopeSubmit, web.ScopeAdmin}) {
		t.Errorf("whoami with open reads = %+v", w)
	}
	open.send(t, "GET", "/api/v1/whoami", token, "").json(t, &w)
	if w.Token == nil || w.Token.Name != "default" || w.Actor != "default" {
		t.Errorf("whoami with Options.Token = %+v, want it named default", w)
	}
}

// TestActorHeader: behind an authenticating proxy the audit log records
// the person the trusted header names, for every kind of action, and the
// request log names them; the header still needs a token with the scope;
// a value that cannot be a name is refused; without the option the header
// is ignored.
func TestActorHeader(t *testing.T) {
	opts := scopedOptions()
	opts.ActorHeader = "X-Forwarded-User"
	f := newFixture(t, opts)
	as := []string{"X-Forwarded-User", "alice@example.com"}
	var w whoami
	f.send(t, "GET", "/api/v1/whoami", readToken, "", as...).json(t, &w)
	if w.Actor != "alice@example.com" || w.ActorHeader != "X-Forwarded-User" || w.Token == nil || w.Token.Name != "reader" {
		t.Errorf("whoami through the proxy = %+v", w)
	}
	// The header grants nothing: a read token cannot redrive.
	f.send(t, "POST", "/api/v1/dlq/redrive", readToken, `{"class":"final"}`, as...).apiErr(t, http.StatusForbidden)
	for _, rq := range []struct{ path, body string }{
		{"/api/v1/dlq/redrive", `{"class":"final"}`},
		{"/api/v1/dlq/purge", `{"class":"retryable"}`},
		{"/api/v1/items/cancel", `{"pipeline":"mail","reason":"wrong batch"}`},
		{"/api/v1/stages/pause", `{"pipeline":"docs","stage":"fetch","reason":"outage"}`},
	} {
		if r := f.send(t, "POST", rq.path, adminToken, rq.body, as...); r.code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", rq.path, r.code, r.body)
		}
	}
	var page struct{ Data []redrive.AuditAction }
	f.send(t, "GET", "/api/v1/audit", readToken, "").json(t, &page)
	if len(page.Data) != 4 {
		t.Fatalf("audit log = %+v, want 4 entries", page.Data)
	}
	for _, a := range page.Data {
		if a.Actor != "alice@example.com" {
			t.Errorf("%s recorded by %q, want alice@example.com", a.Kind, a.Actor)
		}
	}
	ps, err := f.store.PausedStages(t.Context())
	if err != nil || len(ps) != 1 || ps[0].By != "alice@example.com" {
		t.Errorf("pause = %+v, %v; want by alice", ps, err)
	}
	if !strings.Contains(f.logs.String(), "actor=alice@example.com") {
		t.Errorf("the request log does not name the actor:\n%s", f.logs.String())
	}
	// Without the header, the token's name.
	if r := f.send(t, "POST", "/api/v1/stages/resume", adminToken, `{"pipeline":"docs","stage":"fetch"}`); r.code != http.StatusOK {
		t.Fatalf("resume: %d %s", r.code, r.body)
	}
	f.send(t, "GET", "/api/v1/audit?limit=1", readToken, "").json(t, &page)
	if page.Data[0].Actor != "ops" {
		t.Errorf("resume without the header recorded by %q, want the token's name ops", page.Data[0].Actor)
	}
	for _, bad := range []string{strings.Repeat("a", web.MaxActorBytes+1), "alice\x01"} {
		_, field := f.send(t, "GET", "/api/v1/runs", readToken, "", "X-Forwarded-User", bad).apiErr(t, http.StatusBadRequest)
		if field != "X-Forwarded-User" {
			t.Errorf("bad header %q: field %q", bad, field)
		}
	}

	// Not configured: a client's header is ignored.
	plain := newFixture(t, scopedOptions())
	if r := plain.send(t, "POST", "/api/v1/dlq/purge", adminToken, `{"class":"final"}`, as...); r.code != http.StatusOK {
		t.Fatalf("purge: %d %s", r.code, r.body)
	}
	plain.send(t, "GET", "/api/v1/audit", readToken, "").json(t, &page)
	if len(page.Data) != 1 || page.Data[0].Actor != "ops" {
		t.Errorf("without ActorHeader the purge was recorded as %+v, want by ops", page.Data)
	}
}

// TestUnknownFilterValues: every filter value that names nothing is a 400
// naming the field, on every endpoint that takes it, rather than an empty
// answer.
func TestUnknownFilterValues(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	for _, c := range []struct{ target, field string }{
		{"/api/v1/dlq?fingerprint=no+such+cause", "fingerprint"},
		{"/api/v1/errors?fingerprint=no+such+cause", "fingerprint"},
		{"/api/v1/count?fingerprint=no+such+cause", "fingerprint"},
		{"/api/v1/items?fingerprint=no+such+cause", "fingerprint"},
		{"/api/v1/dlq/export?fingerprint=no+such+cause", "fingerprint"},
		{"/api/v1/dlq?class=fnal", "class"},
		{"/api/v1/items?state=zombie", "state"},
		{"/api/v1/count?state=zombie", "state"},
		{"/api/v1/dlq?stage=fetchh", "stage"},
		{"/api/v1/dlq?action=99", "action"},
		{"/api/v1/count?action=99", "action"},
		{"/api/v1/runs?pipeline=nope", "pipeline"},
		{"/api/v1/stats?pipeline=nope", "pipeline"},
		{"/api/v1/stages?pipeline=nope", "pipeline"},
		{"/api/v1/timeline?pipeline=nope", "pipeline"},
	} {
		if _, field := f.get(t, c.target).apiErr(t, http.StatusBadRequest); field != c.field {
			t.Errorf("GET %s: field %q, want %q", c.target, field, c.field)
		}
	}
	r := f.do(t, "POST", "/api/v1/dlq/redrive", "Bearer "+token, `{"fingerprint":"no such cause"}`)
	if _, field := r.apiErr(t, http.StatusBadRequest); field != "fingerprint" {
		t.Errorf("redrive of an unknown cause: field %q", field)
	}
	f.get(t, "/api/v1/stats?run=999").apiErr(t, http.StatusNotFound)
}

// TestAuditActionFilter: an audit entry selects exactly the items its
// action changed, after they moved on, through the API's action filter;
// those items can be acted on again by it.
func TestAuditActionFilter(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	if r := f.post(t, "/api/v1/dlq/redrive", `{"class":"final","limit":7}`); r.code != http.StatusOK {
		t.Fatalf("redrive: %d %s", r.code, r.body)
	}
	var page struct{ Data []redrive.AuditAction }
	f.get(t, "/api/v1/audit").json(t, &page)
	if len(page.Data) != 1 || page.Data[0].Count != 7 {
		t.Fatalf("audit log = %+v", page.Data)
	}
	id := strconv.FormatInt(page.Data[0].ID, 10)
	items := f.items(t, "/api/v1/items?action="+id)
	if len(items.Data) != 7 {
		t.Fatalf("items of audit entry %s: %d, want the 7 redriven", id, len(items.Data))
	}
	for _, it := range items.Data {
		if it.State != redrive.StatePending || it.Attempt != 0 {
			t.Errorf("item %d of the redrive: %s attempt %d, want pending with a fresh counter", it.ID, it.State, it.Attempt)
		}
	}
	var c struct{ Total int }
	f.get(t, "/api/v1/count?state=pending&action="+id).json(t, &c)
	if c.Total != 7 {
		t.Errorf("count of the redrive's pending items = %d, want 7", c.Total)
	}
	// The dead-letter view of the entry is empty now: they moved on.
	f.get(t, "/api/v1/count?state=dead&action="+id).json(t, &c)
	if c.Total != 0 {
		t.Errorf("count of the redrive's dead items = %d, want 0", c.Total)
	}
	if n := f.count(t, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}, Class: "final"}); n != 23 {
		t.Errorf("%d final dead items left, want 23", n)
	}
}
