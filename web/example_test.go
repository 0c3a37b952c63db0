package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/redrive/redrive/sqlite"
	"github.com/redrive/redrive/web"
)

// Serve the JSON API over a store. Reads are open; writes (here a dry-run
// redrive of the dead-letter queue) need the bearer token. A program
// would call web.Serve(ctx, "127.0.0.1:8080", h) instead of httptest.
func ExampleNewHandler() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "redrive-web-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	h := web.NewHandler(store, web.Options{Token: "s3cret"})
	srv := httptest.NewServer(h)
	defer srv.Close()

	do := func(method, path, token, body string) {
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			fmt.Println(err)
			return
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 400 { // errors are {"error": "message"}
			var e struct{ Error string }
			json.Unmarshal(b, &e)
			fmt.Println(method, path, resp.StatusCode, e.Error)
			return
		}
		fmt.Println(method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	do("GET", "/healthz", "", "")
	do("POST", "/api/v1/dlq/redrive", "", `{"pipeline":"summarize","dry_run":true}`)
	do("POST", "/api/v1/dlq/redrive", "s3cret", `{"pipeline":"summarize","dry_run":true}`)
	// Output:
	// GET /healthz 200 {"status":"ok"}
	// POST /api/v1/dlq/redrive 401 missing bearer token: send Authorization: Bearer <token>
	// POST /api/v1/dlq/redrive 400 unknown pipeline "summarize": no run of it exists
}
