package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
	"github.com/redrive/redrive/web"
)

const workToken = "work-token-0123456789"

// leaseFixture serves a started client whose pipeline "ext" has one
// external stage "work", and which holds n items.
func leaseFixture(t *testing.T, n int) (http.Handler, *redrive.Client) {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := redrive.NewClient(s, redrive.Config{PollInterval: 10 * time.Millisecond})
	if err := c.Register(redrive.Pipeline{Name: "ext", Stages: []redrive.Stage{{Name: "work", External: true}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	items := make([]redrive.NewItem, n)
	for i := range items {
		items[i] = redrive.NewItem{Key: strconv.Itoa(i), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	if _, err := c.StartRun(context.Background(), "ext", items, redrive.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	h := web.NewHandler(s, web.Options{
		Tokens: []web.Token{
			{Name: "worker", Scopes: []web.Scope{web.ScopeWork}, Secret: workToken},
			{Name: "reader", Scopes: []web.Scope{web.ScopeRead}, Secret: readToken},
		},
		Work: func() *redrive.Client { return c },
	})
	return h, c
}

func post(t *testing.T, h http.Handler, path, tok, body string) response {
	t.Helper()
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return response{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// TestOpenAPILeases makes a request to every endpoint of external workers
// (and their errors) and checks each answer against docs/openapi.yaml; it
// also shows the protocol's fencing: a second completion of one lease is a
// 409 that changes nothing.
func TestOpenAPILeases(t *testing.T) {
	doc := loadSpec(t)
	ops := specOperations(doc)
	h, c := leaseFixture(t, 4)
	none := web.NewHandler(c.Store(), web.Options{Tokens: []web.Token{{Name: "worker", Scopes: []web.Scope{web.ScopeWork}, Secret: workToken}}})

	var leased struct {
		Leases []struct {
			ID    int64           `json:"id"`
			Token int64           `json:"token"`
			Input json.RawMessage `json:"input"`
		} `json:"leases"`
	}
	r := post(t, h, "/api/v1/leases", workToken, `{"pipeline":"ext","stage":"work","worker":"w","max":3,"wait":5,"lease":30}`)
	r.json(t, &leased)
	if r.code != 200 || len(leased.Leases) != 3 || string(leased.Leases[0].Input) != `{"n":0}` {
		t.Fatalf("lease: %d %s", r.code, r.body)
	}
	ref := func(i int) string {
		return fmt.Sprintf(`{"id":%d,"token":%d}`, leased.Leases[i].ID, leased.Leases[i].Token)
	}
	stale := fmt.Sprintf(`{"id":%d,"token":%d}`, leased.Leases[0].ID, leased.Leases[0].Token+1000)
	complete := fmt.Sprintf(`{"worker":"w","results":[{"id":%d,"token":%d,"output":{"ok":true}}]}`, leased.Leases[0].ID, leased.Leases[0].Token)
	type req struct {
		op   string
		h    http.Handler
		tok  string
		body string
		code int
	}
	reqs := []req{
		{"/api/v1/leases", h, workToken, `{"pipeline":"ext","stage":"work","worker":"w","max":2000}`, 400},
		{"/api/v1/leases", h, workToken, `{"pipeline":"nope","stage":"work","worker":"w"}`, 404},
		{"/api/v1/leases", h, readToken, `{"pipeline":"ext","stage":"work","worker":"w"}`, 403},
		{"/api/v1/leases", h, "", `{"pipeline":"ext","stage":"work","worker":"w"}`, 401},
		{"/api/v1/leases", none, workToken, `{"pipeline":"ext","stage":"work","worker":"w"}`, 503},
		{"/api/v1/leases/heartbeat", h, workToken, `{"worker":"w","leases":[` + ref(0) + `,` + ref(1) + `],"lease":10}`, 200},
		{"/api/v1/leases/heartbeat", h, workToken, `{"worker":"w","leases":[` + stale + `]}`, 409},
		{"/api/v1/leases/heartbeat", h, workToken, `{"worker":"w","leases":[{"id":0,"token":1}]}`, 400},
		{"/api/v1/leases/complete", h, workToken, complete, 200},
		{"/api/v1/leases/complete", h, workToken, complete, 409},
		{"/api/v1/leases/complete", h, workToken, `{"results":[{"id":1,"token":1,"output":{}}],"bogus":1}`, 400},
		{"/api/v1/leases/fail", h, workToken, `{"worker":"w","failures":[{"id":` + strconv.FormatInt(leased.Leases[1].ID, 10) + `,"token":` +
			strconv.FormatInt(leased.Leases[1].Token, 10) + `,"class":"rate_limited","error":"429","retry_after":0.5}]}`, 200},
		{"/api/v1/leases/fail", h, workToken, `{"failures":[{"id":1,"token":1,"class":"final","retry_after":3}]}`, 400},
		{"/api/v1/leases/release", h, workToken, `{"worker":"w","leases":[` + ref(2) + `],"leaving":true}`, 200},
		{"/api/v1/leases/release", none, workToken, `{"worker":"w"}`, 503},
	}
	for _, rq := range reqs {
		r := post(t, rq.h, rq.op, rq.tok, rq.body)
		name := "POST " + rq.op + " " + rq.body
		if r.code != rq.code {
			t.Errorf("%s: %d, want %d: %s", name, r.code, rq.code, r.body)
			continue
		}
		op, ok := ops["POST "+rq.op]
		if !ok {
			t.Errorf("%s is not described", rq.op)
			continue
		}
		resp, ok := op["responses"].(map[string]any)[strconv.Itoa(r.code)].(map[string]any)
		if !ok {
			t.Errorf("%s: status %d is not described", name, r.code)
			continue
		}
		if ref, isRef := resp["$ref"].(string); isRef {
			var err error
			if resp, err = resolveAny(doc, ref); err != nil {
				t.Fatal(err)
			}
		}
		schema := resp["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
		v, err := decodeJSON(r.body)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, e := range checkSchema(doc, schema, v, "body") {
			t.Errorf("%s: %s", name, e)
		}
	}
	// The item completed twice holds the first output, with one attempt.
	it, err := c.Store().GetItem(context.Background(), leased.Leases[0].ID)
	if err != nil || it.State != redrive.StateSucceeded || string(it.Payload) != `{"ok":true}` {
		t.Errorf("item completed twice: %s %s, %v", it.State, it.Payload, err)
	}
	if as, _ := c.Store().Attempts(context.Background(), it.ID); len(as) != 1 {
		t.Errorf("item completed twice has %d attempts, want 1", len(as))
	}
}

// TestLeaseBytes hands out an input that is not JSON as base64, and takes
// an output that is not JSON as base64, as the API shows item bytes
// everywhere.
func TestLeaseBytes(t *testing.T) {
	h, c := leaseFixture(t, 0)
	if _, err := c.StartRun(context.Background(), "ext", []redrive.NewItem{{Payload: []byte("plain text")}}, redrive.RunOptions{Name: "bytes"}); err != nil {
		t.Fatal(err)
	}
	var leased struct {
		Leases []struct {
			ID            int64           `json:"id"`
			Token         int64           `json:"token"`
			Input         json.RawMessage `json:"input"`
			InputEncoding string          `json:"input_encoding"`
		} `json:"leases"`
	}
	r := post(t, h, "/api/v1/leases", workToken, `{"pipeline":"ext","stage":"work","worker":"w","wait":5}`)
	r.json(t, &leased)
	if len(leased.Leases) != 1 || leased.Leases[0].InputEncoding != "base64" || string(leased.Leases[0].Input) != `"cGxhaW4gdGV4dA=="` {
		t.Fatalf("lease: %d %s", r.code, r.body)
	}
	l := leased.Leases[0]
	bad := post(t, h, "/api/v1/leases/complete", workToken, fmt.Sprintf(`{"results":[{"id":%d,"token":%d,"output":"%%%%","output_encoding":"base64"}]}`, l.ID, l.Token))
	if bad.code != 400 || !strings.Contains(string(bad.body), `"results[0].output"`) {
		t.Errorf("bad base64: %d %s", bad.code, bad.body)
	}
	r = post(t, h, "/api/v1/leases/complete", workToken, fmt.Sprintf(`{"results":[{"id":%d,"token":%d,"output":"AAEC","output_encoding":"base64"}]}`, l.ID, l.Token))
	if r.code != 200 {
		t.Fatalf("complete: %d %s", r.code, r.body)
	}
	it, err := c.Store().GetItem(context.Background(), l.ID)
	if err != nil || string(it.Payload) != "\x00\x01\x02" {
		t.Errorf("output = %q, %v: want the decoded bytes", it.Payload, err)
	}
}
