package web_test

import (
	"net/http"
	"testing"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

// TestErrorGroups: the 30 "corrupt document i" deaths are one cause, ranked
// by deaths, whose distinct messages are counted among its newest
// redrive.ErrorSamples; the filter (fingerprint too) narrows the groups and
// names unknown values.
func TestErrorGroups(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	r := f.get(t, "/api/v1/errors?run=1")
	if r.code != http.StatusOK {
		t.Fatalf("GET /api/v1/errors: %d %s", r.code, r.body)
	}
	var groups struct{ Data []redrive.ErrorGroup }
	r.json(t, &groups)
	want := []struct {
		fp             string
		dead, failures int
		messages       int
	}{
		{"corrupt document <n>", 30, 30, redrive.ErrorSamples},
		{"timeout talking to api", 30, 30, 1},
		{"<n> from api", 0, 30, 1},
	}
	if len(groups.Data) != len(want) {
		t.Fatalf("groups = %+v, want %d", groups.Data, len(want))
	}
	for i, w := range want {
		g := groups.Data[i]
		if g.Fingerprint != w.fp || g.Dead != w.dead || g.Failures != w.failures || g.Messages != w.messages {
			t.Errorf("group %d = %+v, want %+v", i, g, w)
		}
	}
	if g := groups.Data[0]; len(g.Examples) != 3 || len(g.ExampleItems) != 3 || g.Examples[0] != "corrupt document 116" {
		t.Errorf("examples of %q = %q %v, want the three newest", g.Fingerprint, g.Examples, g.ExampleItems)
	}
	r = f.get(t, "/api/v1/errors?fingerprint=corrupt+document+%3Cn%3E")
	r.json(t, &groups)
	if len(groups.Data) != 1 || groups.Data[0].Dead != 30 || groups.Data[0].Failures != 30 {
		t.Errorf("fingerprint filter groups = %+v", groups.Data)
	}
	r = f.get(t, "/api/v1/errors?class=retryable")
	r.json(t, &groups)
	if len(groups.Data) != 2 || groups.Data[0].Fingerprint != "timeout talking to api" {
		t.Errorf("class=retryable groups = %+v", groups.Data)
	}
	if _, field := f.get(t, "/api/v1/errors?stage=nope").apiErr(t, http.StatusBadRequest); field != "stage" {
		t.Errorf("unknown stage: field %q", field)
	}
	f.get(t, "/api/v1/errors?run=999").apiErr(t, http.StatusNotFound)
	f.get(t, "/api/v1/errors?state=pending").apiErr(t, http.StatusBadRequest)
}

// TestCount: totals count every page of a filter.
func TestCount(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	for target, want := range map[string]int{
		"/api/v1/count":                                      130,
		"/api/v1/count?state=dead":                           60,
		"/api/v1/count?state=dead&class=final":               30,
		"/api/v1/count?state=pending&pipeline=docs":          30,
		"/api/v1/count?error_contains=CORRUPT+DOCUMENT":      30,
		"/api/v1/count?fingerprint=corrupt+document+%3Cn%3E": 30,
	} {
		var c struct{ Total int }
		r := f.get(t, target)
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", target, r.code, r.body)
		}
		r.json(t, &c)
		if c.Total != want {
			t.Errorf("GET %s: total %d, want %d", target, c.Total, want)
		}
	}
	f.get(t, "/api/v1/count?limit=5").apiErr(t, http.StatusBadRequest)
	if _, field := f.get(t, "/api/v1/count?fingerprint=nothing+like+it").apiErr(t, http.StatusBadRequest); field != "fingerprint" {
		t.Errorf("unknown cause: field %q, want fingerprint", field)
	}
}

// TestAuditLog: redrives and purges through the API are recorded with who,
// what selection, how many and how; dry runs are not.
func TestAuditLog(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	if r := f.post(t, "/api/v1/dlq/redrive", `{"class":"final","stage":"fetch","rate":5,"dry_run":true}`); r.code != http.StatusOK {
		t.Fatalf("dry run: %d %s", r.code, r.body)
	}
	if r := f.post(t, "/api/v1/dlq/redrive", `{"class":"final","stage":"fetch","rate":5}`); r.code != http.StatusOK {
		t.Fatalf("redrive: %d %s", r.code, r.body)
	}
	if r := f.post(t, "/api/v1/dlq/purge", `{"class":"retryable"}`); r.code != http.StatusOK {
		t.Fatalf("purge: %d %s", r.code, r.body)
	}
	var page struct {
		Data       []redrive.AuditAction
		NextCursor string `json:"next_cursor"`
	}
	f.get(t, "/api/v1/audit?limit=1").json(t, &page)
	if len(page.Data) != 1 || page.NextCursor == "" {
		t.Fatalf("first page = %+v", page)
	}
	purge := page.Data[0]
	if purge.Kind != "purge" || purge.Actor != "default" || purge.Filter != "class=retryable" || purge.Count != 30 {
		t.Errorf("purge entry = %+v", purge)
	}
	cursor := page.NextCursor
	page.Data, page.NextCursor = nil, ""
	f.get(t, "/api/v1/audit?limit=1&cursor="+cursor).json(t, &page)
	if len(page.Data) != 1 || page.NextCursor != "" {
		t.Fatalf("second page = %+v", page)
	}
	rd := page.Data[0]
	if rd.Kind != "redrive" || rd.Filter != "class=final&stage=fetch" || rd.Count != 30 || rd.Detail != "rate 5/s" || rd.At.IsZero() {
		t.Errorf("redrive entry = %+v", rd)
	}
	f.get(t, "/api/v1/audit?cursor=bogus").apiErr(t, http.StatusBadRequest)
}

// TestAuditActorAndScope: the audit log names the token that acted; a
// token without the admin scope cannot act, and nothing is recorded.
func TestAuditActorAndScope(t *testing.T) {
	f := newFixture(t, web.Options{Tokens: []web.Token{
		{Name: "alice", Secret: "alice-secret-token", Scopes: []web.Scope{web.ScopeAdmin}},
		{Name: "reader", Secret: "reader-secret-token", Scopes: []web.Scope{web.ScopeSubmit}},
	}})
	if r := f.do(t, "POST", "/api/v1/dlq/purge", "Bearer reader-secret-token", `{"class":"final"}`); r.code != http.StatusForbidden {
		t.Fatalf("purge without the admin scope: %d %s", r.code, r.body)
	}
	if n := f.count(t, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}, Class: "final"}); n != 30 {
		t.Fatalf("a refused purge changed items: %d left", n)
	}
	if r := f.do(t, "POST", "/api/v1/dlq/purge", "Bearer alice-secret-token", `{"class":"final"}`); r.code != http.StatusOK {
		t.Fatalf("purge: %d %s", r.code, r.body)
	}
	var page struct{ Data []redrive.AuditAction }
	f.get(t, "/api/v1/audit").json(t, &page)
	if len(page.Data) != 1 || page.Data[0].Actor != "alice" || page.Data[0].Count != 30 {
		t.Errorf("audit log = %+v, want one purge by alice", page.Data)
	}
}
