package web_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

// TestFiltersNameWhatDoesNotExist: a filter naming a class, stage,
// pipeline or run that does not exist is a 400 naming the field, or a 404,
// not an empty 200; error search ignores case.
func TestFiltersNameWhatDoesNotExist(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	for _, tc := range []struct {
		method, target, body string
		code                 int
		field, want          string
	}{
		{"GET", "/api/v1/dlq?class=fnal", "", http.StatusBadRequest, "class", `unknown class "fnal"`},
		{"GET", "/api/v1/items?stage=llm-call", "", http.StatusBadRequest, "stage", `unknown stage "llm-call"`},
		{"GET", "/api/v1/dlq?pipeline=dogs", "", http.StatusBadRequest, "pipeline", `unknown pipeline "dogs"`},
		{"GET", "/api/v1/dlq?run=42", "", http.StatusNotFound, "run", "run 42 does not exist"},
		{"GET", "/api/v1/dlq/export?class=fnal", "", http.StatusBadRequest, "class", `unknown class`},
		{"POST", "/api/v1/dlq/redrive", `{"run":42}`, http.StatusNotFound, "run", "run 42 does not exist"},
		{"POST", "/api/v1/dlq/purge", `{"stage":"llm-call"}`, http.StatusBadRequest, "stage", `unknown stage`},
		{"POST", "/api/v1/dlq/redrive", `{"class":"final","from_stage":"nope"}`, http.StatusBadRequest, "from_stage", `never reached stage "nope"`},
		{"GET", "/api/v1/runs/42", "", http.StatusNotFound, "", "run 42 does not exist"},
		{"GET", "/api/v1/items/4242", "", http.StatusNotFound, "", "item 4242 does not exist"},
	} {
		auth := ""
		if tc.method == "POST" {
			auth = "Bearer " + token
		}
		msg, field := f.do(t, tc.method, tc.target, auth, tc.body).apiErr(t, tc.code)
		if field != tc.field || !strings.Contains(msg, tc.want) || strings.Contains(msg, "sqlite") {
			t.Errorf("%s %s: %q (field %q), want %q naming %q", tc.method, tc.target, msg, field, tc.want, tc.field)
		}
	}
	p := f.items(t, "/api/v1/dlq?error_contains=TIMEOUT+TALKING&limit=100")
	if len(p.Data) != 30 {
		t.Errorf("error_contains ignoring case: %d items, want 30", len(p.Data))
	}
}

// TestRedriveFromStageAndWarning: the API redrives from a stage and warns
// when no live worker serves the pipeline.
func TestRedriveFromStageAndWarning(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	var got struct {
		Count   int    `json:"count"`
		Warning string `json:"warning"`
	}
	r := f.post(t, "/api/v1/dlq/redrive", fmt.Sprintf(`{"run":%d,"class":"final","from_stage":"fetch"}`, f.docsRun))
	if r.code != http.StatusOK {
		t.Fatalf("redrive: %d %s", r.code, r.body)
	}
	r.json(t, &got)
	if got.Count != 30 || !strings.Contains(got.Warning, "no live worker serves pipeline docs") {
		t.Errorf("redrive = %+v", got)
	}
	if n := f.count(t, redrive.ItemFilter{RunID: f.docsRun, States: []redrive.State{redrive.StatePending}, Stage: "fetch"}); n != 60 {
		t.Errorf("pending at fetch after the redrive: %d, want 60", n)
	}
}
