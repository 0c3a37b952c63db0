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

// BenchmarkSubmitIdempotencyKey measures what binding an Idempotency-Key
// costs a submit of 500 items: hashing the request (its inputs re-encoded
// as canonical JSON), reading the key and binding it. Each op submits one
// batch without the header and one with a fresh key, alternately, to a
// real loopback server, so both are measured under the same load:
//
//	go test -run '^$' -bench SubmitIdempotencyKey -benchtime 40x ./web/
//
// It reports plain-items/s, keyed-items/s and keyed/plain (time ratio:
// above 1 is the key's cost).
func BenchmarkSubmitIdempotencyKey(b *testing.B) {
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
			srv := httptest.NewServer(web.NewHandler(s, web.Options{
				Tokens:    []web.Token{{Name: "bench", Scopes: []web.Scope{web.ScopeSubmit}, Secret: submitToken}},
				Pipelines: []web.PipelineRef{{Name: "bench", FirstStage: "first"}},
			}))
			defer srv.Close()
			submit := func(i int, kind, idem string) time.Duration {
				sub := make([]item, submitBatch)
				for j := range sub {
					sub[j] = item{Key: fmt.Sprintf("%s%d-%d", kind, i, j), Input: fmt.Appendf(nil, `{"n":%d,"text":"an item of the benchmark","tags":["a","b"]}`, j)}
				}
				body, err := json.Marshal(map[string]any{"run": "bench", "items": sub})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				req, _ := http.NewRequest("POST", srv.URL+"/api/v1/pipelines/bench/items", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+submitToken)
				req.Header.Set("Content-Type", "application/json")
				if idem != "" {
					req.Header.Set("Idempotency-Key", idem)
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					b.Fatal(err)
				}
				var out struct{ Added int }
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if err != nil || out.Added != submitBatch {
					b.Fatalf("batch %s%d: status %d, added %d, %v", kind, i, resp.StatusCode, out.Added, err)
				}
				return time.Since(start)
			}
			var plain, keyed time.Duration
			b.ResetTimer()
			for i := range b.N {
				plain += submit(i, "p", "")
				keyed += submit(i, "k", fmt.Sprintf("batch-%d", i))
			}
			n := float64(b.N * submitBatch)
			b.ReportMetric(n/plain.Seconds(), "plain-items/s")
			b.ReportMetric(n/keyed.Seconds(), "keyed-items/s")
			b.ReportMetric(keyed.Seconds()/plain.Seconds(), "keyed/plain")
		})
	}
}
