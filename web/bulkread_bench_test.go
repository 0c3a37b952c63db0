package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
	"github.com/redrive/redrive/sqlite"
	"github.com/redrive/redrive/web"
)

// bulkItems is how many succeeded items the bulk-read benchmark's run
// holds, each with an output of about 200 bytes and one attempt.
const bulkItems = 10_000

// bulkLater is how many items of a later run follow the run's rows in the
// items table, as in a store that has gone on working: a listing by run
// that walked the table in ID order past the run's last item would read
// them all.
const bulkLater = 50_000

// bulkPage is the page size of the paged listing: the API's largest.
const bulkPage = 500

const bulkToken = "bulk-read-token-5a1f3c9e"

// BenchmarkBulkRead times reading a 10,000-item run's outputs three ways,
// through the real handler on a loopback server with keep-alive, each op
// doing all three in an order that rotates from op to op, so that all are
// measured under the same load:
//
//   - paged: GET /api/v1/items?run=…&include=output&limit=500, following
//     next_cursor (20 pages);
//   - ndjson: GET /api/v1/runs/{id}/items.ndjson, one line an item;
//   - single: 10,000 sequential GET /api/v1/items/{id}.
//
// The client decodes every answer and checks it got every item with its
// output. The goal is bulk ≤ 1/20 of single, reported as the ratios
// paged/single and ndjson/single of the ways' median times over the ops
// (≤ 0.05 meets it), beside each way's median in milliseconds, and the
// same ratios of the process's CPU time (client, server and, on SQLite,
// the database), which a busy machine moves less. On SQLite,
// and on PostgreSQL with
// REDRIVE_TEST_POSTGRES set:
//
//	REDRIVE_TEST_POSTGRES=postgres://postgres@127.0.0.1:5432/test?sslmode=disable go test ./web -run '^$' -bench BulkRead -benchtime 3x
func BenchmarkBulkRead(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bulk.db"))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		benchBulkRead(b, s, nil)
	})
	b.Run("postgres", func(b *testing.B) {
		if os.Getenv(pgtest.EnvURL) == "" {
			b.Skip(pgtest.EnvURL + " is not set")
		}
		url, schema := pgtest.NewSchema(b)
		s, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, Migrate: true})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		// Statistics as autovacuum takes them within a minute of the
		// fill, so that the plans are a running store's, not a new one's.
		benchBulkRead(b, s, func() {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, `ANALYZE `+pgx.Identifier{schema, "items"}.Sanitize()); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// benchBulkRead fills s, calls filled when set, and times the three ways.
func benchBulkRead(b *testing.B, s redrive.Store, filled func()) {
	start := time.Now()
	run, ids, want := fillBulkRun(b, s)
	if filled != nil {
		filled()
	}
	b.Logf("filled %d succeeded items and %d later ones in %v", bulkItems, bulkLater, time.Since(start).Round(time.Millisecond))

	// Each request is logged, as redrive serve does, to nowhere.
	srv := httptest.NewServer(web.NewHandler(s, web.Options{
		Tokens: []web.Token{{Name: "bench", Scopes: []web.Scope{web.ScopeRead}, Secret: bulkToken}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	defer srv.Close()
	c := &bulkClient{b: b, base: srv.URL, http: srv.Client()}

	ways := []struct {
		name string
		read func(run int64, ids []int64) map[int64]string
	}{
		{"paged", c.paged},
		{"ndjson", c.ndjson},
		{"single", c.single},
	}
	took := make([][]time.Duration, len(ways))
	cpu := make([][]time.Duration, len(ways))
	b.ResetTimer()
	for i := range b.N {
		for j := range ways {
			k := (i + j) % len(ways)
			start, startCPU := time.Now(), processCPU()
			got := ways[k].read(run, ids)
			took[k] = append(took[k], time.Since(start))
			cpu[k] = append(cpu[k], processCPU()-startCPU)
			if len(got) != len(want) {
				b.Fatalf("%s: %d items with outputs, want %d", ways[k].name, len(got), len(want))
			}
			for id, out := range want {
				if got[id] != out {
					b.Fatalf("%s: item %d output %q, want %q", ways[k].name, id, got[id], out)
				}
			}
		}
	}
	b.StopTimer()
	// Medians: a burst of the machine's other work in one op moves them
	// less than it moves a sum.
	paged, ndjson, single := median(took[0]), median(took[1]), median(took[2])
	b.ReportMetric(paged.Seconds()*1000, "paged-ms")
	b.ReportMetric(ndjson.Seconds()*1000, "ndjson-ms")
	b.ReportMetric(single.Seconds()*1000, "single-ms")
	b.ReportMetric(paged.Seconds()/single.Seconds(), "paged/single")
	b.ReportMetric(ndjson.Seconds()/single.Seconds(), "ndjson/single")
	// CPU time moves less with the machine's other work than the clock
	// does; on SQLite it is the whole cost of a read (on PostgreSQL the
	// server's share is outside this process).
	if c := median(cpu[2]); c > 0 {
		b.ReportMetric(median(cpu[0]).Seconds()/c.Seconds(), "paged/single-cpu")
		b.ReportMetric(median(cpu[1]).Seconds()/c.Seconds(), "ndjson/single-cpu")
	}
	b.ReportMetric(0, "ns/op") // the three ways' own figures say it
}

// median returns the median of ds (the mean of the middle two of an even
// count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// fillBulkRun fills s through the store's API: a run of bulkItems items
// that each succeeded once with an output, then a later run of bulkLater
// pending items. It returns the run, its items' IDs and their outputs.
func fillBulkRun(b *testing.B, s redrive.Store) (int64, []int64, map[int64]string) {
	ctx := context.Background()
	now := time.Now().UTC()
	const chunk = 1000
	run, _, err := s.CreateRun(ctx, "bulk", redrive.RunOptions{}, now)
	if err != nil {
		b.Fatal(err)
	}
	var ids []int64
	want := make(map[int64]string, bulkItems)
	for n := 0; n < bulkItems; n += chunk {
		items := make([]redrive.NewItem, chunk)
		for i := range items {
			items[i] = redrive.NewItem{Key: fmt.Sprintf("doc-%05d", n+i), Payload: fmt.Appendf(nil, `{"url":"https://example.com/docs/%d"}`, n+i)}
		}
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "bulk", Stage: "summarize", Items: items, Now: now}); err != nil {
			b.Fatal(err)
		}
		leases, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "bench", Pipelines: []string{"bulk"}, Limit: chunk, LeaseUntil: now.Add(time.Hour), Now: now})
		if err != nil || len(leases) != chunk {
			b.Fatalf("claim: %d leases, %v", len(leases), err)
		}
		cs := make([]redrive.Completion, len(leases))
		for i, l := range leases {
			out := fmt.Sprintf(`{"summary":"document %d is about retries, dead letters and the items that outlive an outage of what they depend on","words":%d,"model":"small-1"}`, l.Item.ID, 100+i)
			ids = append(ids, l.Item.ID)
			want[l.Item.ID] = out
			cs[i] = redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StateSucceeded, Stage: "summarize", Attempt: 1,
				Payload: []byte(out), Now: now,
				Record: redrive.Attempt{Stage: "summarize", Number: 1, Outcome: redrive.OutcomeSucceeded, StartedAt: now, FinishedAt: now}}
		}
		if _, err := s.Complete(ctx, cs); err != nil {
			b.Fatal(err)
		}
	}
	later, _, err := s.CreateRun(ctx, "later", redrive.RunOptions{}, now)
	if err != nil {
		b.Fatal(err)
	}
	for n := 0; n < bulkLater; n += chunk {
		items := make([]redrive.NewItem, chunk)
		for i := range items {
			items[i] = redrive.NewItem{Payload: fmt.Appendf(nil, `{"n":%d}`, n+i)}
		}
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: later.ID, Pipeline: "later", Stage: "first", Items: items, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
	return run.ID, ids, want
}

// bulkClient reads a run's outputs the benchmark's three ways.
type bulkClient struct {
	b    *testing.B
	base string
	http *http.Client
}

func (c *bulkClient) get(path string) *http.Response {
	req, err := http.NewRequest("GET", c.base+path, nil)
	if err != nil {
		c.b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bulkToken)
	resp, err := c.http.Do(req)
	if err != nil {
		c.b.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.b.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return resp
}

func (c *bulkClient) paged(run int64, _ []int64) map[int64]string {
	got := make(map[int64]string, bulkItems)
	cursor := ""
	for {
		path := fmt.Sprintf("/api/v1/items?run=%d&include=output&limit=%d", run, bulkPage)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		resp := c.get(path)
		var page struct {
			Data []struct {
				ID     int64           `json:"id"`
				Output json.RawMessage `json:"output"`
			} `json:"data"`
			NextCursor string `json:"next_cursor"`
		}
		err := json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			c.b.Fatalf("GET %s: %v", path, err)
		}
		for _, it := range page.Data {
			got[it.ID] = string(it.Output)
		}
		if page.NextCursor == "" {
			return got
		}
		cursor = page.NextCursor
	}
}

func (c *bulkClient) ndjson(run int64, _ []int64) map[int64]string {
	got := make(map[int64]string, bulkItems)
	resp := c.get(fmt.Sprintf("/api/v1/runs/%d/items.ndjson", run))
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var l struct {
			ID     int64           `json:"id"`
			Output json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			c.b.Fatalf("export line %q: %v", sc.Bytes(), err)
		}
		got[l.ID] = string(l.Output)
	}
	if err := sc.Err(); err != nil {
		c.b.Fatalf("export: %v", err)
	}
	return got
}

func (c *bulkClient) single(_ int64, ids []int64) map[int64]string {
	got := make(map[int64]string, len(ids))
	for _, id := range ids {
		path := fmt.Sprintf("/api/v1/items/%d", id)
		resp := c.get(path)
		var d struct {
			Item struct {
				ID int64 `json:"id"`
			} `json:"item"`
			Output json.RawMessage `json:"output"`
		}
		err := json.NewDecoder(resp.Body).Decode(&d)
		// Drain to the end so that the connection is reused.
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			c.b.Fatalf("GET %s: %v", path, err)
		}
		got[d.Item.ID] = string(d.Output)
	}
	return got
}
