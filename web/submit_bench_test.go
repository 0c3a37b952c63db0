package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
	"github.com/redrive/redrive/sqlite"
	"github.com/redrive/redrive/web"
)

// submitBatch is the batch size of the submit benchmark.
const submitBatch = 500

// BenchmarkSubmit compares the items per second of submitting batches of
// 500 over HTTP (a real loopback server: JSON, token check, validation,
// the run's counts in the answer) with the store's own Enqueue of the same
// batches, on each store. Each op submits one batch each way, alternately,
// so both rates are measured under the same load of a busy machine:
//
//	go test -run '^$' -bench Submit -benchtime 40x ./web/
//
// It reports direct-items/s, http-items/s and their ratio http/direct.
func BenchmarkSubmit(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) redrive.Store
	}{
		{"sqlite", func(b *testing.B) redrive.Store {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
		{"postgres", func(b *testing.B) redrive.Store {
			url, schema := pgtest.NewSchema(b)
			s, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, Migrate: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
	}
	type item struct {
		Key   string          `json:"key"`
		Input json.RawMessage `json:"input"`
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			ctx := context.Background()
			run, _, err := s.CreateRun(ctx, "direct", redrive.RunOptions{}, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(web.NewHandler(s, web.Options{
				Tokens:    []web.Token{{Name: "bench", Scopes: []web.Scope{web.ScopeSubmit}, Secret: submitToken}},
				Pipelines: []web.PipelineRef{{Name: "bench", FirstStage: "first"}},
			}))
			defer srv.Close()
			var direct, overHTTP time.Duration
			b.ResetTimer()
			for i := range b.N {
				input := func(j int) []byte { return fmt.Appendf(nil, `{"n":%d,"text":"an item of the benchmark"}`, j) }
				items := make([]redrive.NewItem, submitBatch)
				for j := range items {
					items[j] = redrive.NewItem{Key: fmt.Sprintf("b%d-%d", i, j), Payload: input(j)}
				}
				start := time.Now()
				if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "direct", Stage: "first", Items: items, Now: time.Now()}); err != nil {
					b.Fatal(err)
				}
				direct += time.Since(start)

				start = time.Now()
				sub := make([]item, submitBatch)
				for j := range sub {
					sub[j] = item{Key: fmt.Sprintf("b%d-%d", i, j), Input: input(j)}
				}
				body, err := json.Marshal(map[string]any{"run": "bench", "items": sub})
				if err != nil {
					b.Fatal(err)
				}
				req, _ := http.NewRequest("POST", srv.URL+"/api/v1/pipelines/bench/items", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+submitToken)
				req.Header.Set("Content-Type", "application/json")
				resp, err := srv.Client().Do(req)
				if err != nil {
					b.Fatal(err)
				}
				var out struct{ Added int }
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if err != nil || out.Added != submitBatch {
					b.Fatalf("batch %d: status %d, added %d, %v", i, resp.StatusCode, out.Added, err)
				}
				overHTTP += time.Since(start)
			}
			n := float64(b.N * submitBatch)
			b.ReportMetric(n/direct.Seconds(), "direct-items/s")
			b.ReportMetric(n/overHTTP.Seconds(), "http-items/s")
			b.ReportMetric(direct.Seconds()/overHTTP.Seconds(), "http/direct")
		})
	}
}
