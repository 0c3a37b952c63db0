package web_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/sqlite"
	"github.com/redrive/redrive/web"
)

// dlqItems is how many dead items BenchmarkDLQ1M fills a store with.
const dlqItems = 1_000_000

// dlqBudget is the console's answer time the product promises at
// dlqItems dead items.
const dlqBudget = 500 * time.Millisecond

// dlqCause is one of the bench's 50 causes of death: a message template
// with two numbers (an item number and a small one), the fingerprint every
// message of it has, and where it happens.
type dlqCause struct {
	tmpl                   string // two %d verbs
	fp                     string
	pipeline, stage, class string
	stageIndex, pipeIndex  int
	share                  int // buckets out of dlqBuckets
}

// dlqBuckets is the resolution of the causes' shares of the items.
const dlqBuckets = 1000

var dlqPipelines = []string{"docs", "mail", "llm"}
var dlqStages = []string{"fetch", "parse", "store"}

// dlqCauses returns 50 causes, ten kinds of message in five components,
// with shares that fall off as a power law, so that a few causes hold most
// deaths, as in a real dead-letter queue.
func dlqCauses(tb testing.TB) []dlqCause {
	kinds := []struct{ tmpl, class string }{
		{"item %d: malformed model output at byte %d", "final"},
		{"request %d: upstream returned status 503 after %d ms", "retryable"},
		{"request %d rate limited: status 429, retry after %d s", "rate_limited"},
		{"job %d: timeout waiting for 10.0.%d.7:5432", "retryable"},
		{"document %d has %d pages, more than the limit", "final"},
		{"schema validation failed: field items[%d].price is %d below zero", "final"},
		{"connection reset by peer on job %d (attempt %d of 5)", "retryable"},
		{"tokenizer: sequence %d of %d tokens exceeds the context", "final"},
		{"object key-%d not found in bucket b%d", "final"},
		{"dependency answered HTTP 502 for request %d after %d retries", "retryable"},
	}
	components := []string{"ocr", "embed", "summarise", "translate", "index"}
	var causes []dlqCause
	var weights []float64
	total := 0.0
	for c, comp := range components {
		for k, kind := range kinds {
			t := len(causes)
			tmpl := comp + ": " + kind.tmpl
			fp := redrive.Fingerprint(fmt.Sprintf(tmpl, 123456, 78))
			if other := redrive.Fingerprint(fmt.Sprintf(tmpl, 9, 201)); other != fp {
				tb.Fatalf("cause %q: fingerprints %q and %q differ", tmpl, fp, other)
			}
			causes = append(causes, dlqCause{tmpl: tmpl, fp: fp, class: kind.class,
				pipeIndex: (k + c) % len(dlqPipelines), stageIndex: (k + 2*c) % len(dlqStages)})
			w := 1 / math.Pow(float64(t+1), 0.8)
			weights = append(weights, w)
			total += w
		}
	}
	left := dlqBuckets
	for i := range causes {
		causes[i].pipeline = dlqPipelines[causes[i].pipeIndex]
		causes[i].stage = dlqStages[causes[i].stageIndex]
		causes[i].share = max(1, int(weights[i]/total*dlqBuckets))
		left -= causes[i].share
	}
	causes[0].share += left
	return causes
}

// dlqRuns is how many runs each pipeline has; item i belongs to run
// pipeIndex + 1 + len(dlqPipelines)*(i % dlqRuns).
const dlqRuns = 7

// BenchmarkDLQ1M times the dead-letter console at a million dead items:
// the first page of GET /api/v1/dlq, GET /api/v1/count and GET
// /api/v1/errors, unfiltered and with filters, through the real handler on
// a loopback server, on SQLite and (with REDRIVE_TEST_POSTGRES) on
// PostgreSQL. The store is filled in bulk with SQL (not the engine): 50
// causes with numbers in their messages, 3 pipelines of 3 stages, 21 runs,
// one failed attempt per item. It runs only with REDRIVE_BENCH_1M=1:
//
//	REDRIVE_BENCH_1M=1 REDRIVE_TEST_POSTGRES=postgres://... go test ./web/ -run '^$' -bench DLQ1M -benchtime 5x
//
// Each request's time is reported as p50-ms and max-ms over the
// iterations; a p50 above 500 ms is an error. With REDRIVE_BENCH_DIR set,
// the SQLite database is kept there as dlq1m.db and reused by the next run;
// with REDRIVE_BENCH_SCHEMA, so is the PostgreSQL schema of that name.
func BenchmarkDLQ1M(b *testing.B) {
	if os.Getenv("REDRIVE_BENCH_1M") != "1" {
		b.Skip("set REDRIVE_BENCH_1M=1 to fill a store with a million dead items")
	}
	causes := dlqCauses(b)
	b.Run("sqlite", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "redrive.db")
		dir := os.Getenv("REDRIVE_BENCH_DIR")
		if dir != "" {
			path = filepath.Join(dir, "dlq1m.db")
		}
		if _, err := os.Stat(path); dir == "" || err != nil {
			s, err := sqlite.Open(context.Background(), path)
			if err != nil {
				b.Fatal(err)
			}
			s.Close()
			start := time.Now()
			fillSQLite(b, path, causes)
			b.Logf("sqlite: filled %d dead items in %v", dlqItems, time.Since(start).Round(time.Millisecond))
		}
		s, err := sqlite.Open(context.Background(), path)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		benchConsole(b, s, causes)
	})
	b.Run("postgres", func(b *testing.B) {
		if os.Getenv("REDRIVE_TEST_POSTGRES") == "" {
			b.Skip("REDRIVE_TEST_POSTGRES is not set")
		}
		var url, schema string
		if schema = os.Getenv("REDRIVE_BENCH_SCHEMA"); schema != "" {
			url = pgtest.URL(b)
		} else {
			url, schema = pgtest.NewSchema(b)
		}
		s := pgtest.OpenStoreAt(b, url, schema)
		if n, err := s.Count(context.Background(), redrive.ItemFilter{Limit: 1}); err != nil || n == 0 {
			start := time.Now()
			fillPostgres(b, url, schema, causes)
			b.Logf("postgres: filled %d dead items in %v", dlqItems, time.Since(start).Round(time.Millisecond))
		}
		benchConsole(b, s, causes)
	})
}

// dlqT0 is the bench's first failure time, unix seconds; item i failed i
// seconds later.
const dlqT0 = 1_795_000_000

func fillSQLite(b *testing.B, path string, causes []dlqCause) {
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	exec := func(q string, args ...any) {
		b.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			b.Fatalf("%s: %v", q[:min(len(q), 60)], err)
		}
	}
	exec(`CREATE TEMP TABLE bucket (b INTEGER PRIMARY KEY, tmpl TEXT, fp TEXT, pipeline TEXT, stage TEXT,
		stage_index INTEGER, class TEXT, pipe_index INTEGER)`)
	bk := 0
	for _, c := range causes {
		for range c.share {
			exec(`INSERT INTO temp.bucket VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, bk, c.tmpl, c.fp, c.pipeline, c.stage,
				c.stageIndex, c.class, c.pipeIndex)
			bk++
		}
	}
	for p, name := range dlqPipelines {
		for r := range dlqRuns {
			exec(`INSERT INTO runs (id, pipeline, status, created_at) VALUES (?, ?, 'failed', ?)`,
				p+1+len(dlqPipelines)*r, name, int64(dlqT0)*1e9)
		}
	}
	// i*2654435761 mod 10^6 permutes 1..10^6 (the factor is prime to
	// 10^6), so the causes interleave over the IDs as real deaths do.
	exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO items (id, run_id, pipeline, stage, stage_index, state, attempt, enqueued_at, next_at, updated_at,
			order_at, reason_stage, reason_class, reason_error, reason_attempts, reason_at, reason_fingerprint, failed_attempts)
		SELECT i, k.pipe_index + 1 + ? * (i % ?), k.pipeline, k.stage, k.stage_index, 'dead', 1,
			(? + i) * 1000000000, (? + i) * 1000000000, (? + i) * 1000000000, (? + i) * 1000000000,
			k.stage, k.class, printf(k.tmpl, i, (i * 37) % 250), 1, (? + i) * 1000000000, k.fp, 1
		FROM n JOIN temp.bucket k ON k.b = ((i * 2654435761) % 1000000) / 1000`,
		dlqItems, len(dlqPipelines), dlqRuns, dlqT0, dlqT0, dlqT0, dlqT0, dlqT0)
	exec(`INSERT INTO attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, class, error,
			started_at, finished_at, fingerprint)
		SELECT id, run_id, pipeline, stage, stage_index, 1, 'dead', reason_class, reason_error,
			reason_at - 1000000000, reason_at, reason_fingerprint FROM items ORDER BY id`)
	exec(`ANALYZE`)
}

func fillPostgres(b *testing.B, url, schema string, causes []dlqCause) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	q := pgx.Identifier{schema}.Sanitize()
	exec := func(sql string, args ...any) {
		b.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			b.Fatalf("%s: %v", sql[:min(len(sql), 60)], err)
		}
	}
	// The bulk inserts below fire no trigger; the fill writes the counts
	// the triggers keep itself, at the end.
	exec(`SET session_replication_role = replica`)
	exec(`CREATE TEMP TABLE bucket (b int PRIMARY KEY, tmpl text, fp text, pipeline text, stage text,
		stage_index int, class text, pipe_index int)`)
	bk := 0
	for _, c := range causes {
		for range c.share {
			exec(`INSERT INTO bucket VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, bk, strings.ReplaceAll(c.tmpl, "%d", "%s"),
				c.fp, c.pipeline, c.stage, c.stageIndex, c.class, c.pipeIndex)
			bk++
		}
	}
	for p, name := range dlqPipelines {
		for r := range dlqRuns {
			exec(`INSERT INTO `+q+`.runs (id, pipeline, status, created_at) VALUES ($1, $2, 'failed', to_timestamp($3))`,
				p+1+len(dlqPipelines)*r, name, dlqT0)
		}
	}
	exec(`INSERT INTO `+q+`.items (id, run_id, pipeline, stage, stage_index, state, attempt, enqueued_at, next_at, updated_at,
			order_at, reason_stage, reason_class, reason_error, reason_attempts, reason_at, reason_fingerprint, failed_attempts)
		SELECT i, k.pipe_index + 1 + $2 * (i % $3), k.pipeline, k.stage, k.stage_index, 'dead', 1,
			to_timestamp($4 + i), to_timestamp($4 + i), to_timestamp($4 + i), to_timestamp($4 + i),
			k.stage, k.class, format(k.tmpl, i, (i * 37) % 250), 1, to_timestamp($4 + i), k.fp, 1
		FROM generate_series(1, $1::bigint) AS i JOIN bucket k ON k.b = ((i * 2654435761) % 1000000) / 1000`,
		dlqItems, len(dlqPipelines), dlqRuns, dlqT0)
	exec(`SELECT setval($1::regclass, $2)`, q+".items_id_seq", dlqItems)
	exec(`INSERT INTO ` + q + `.attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, class, error,
			started_at, finished_at, fingerprint)
		SELECT id, run_id, pipeline, stage, stage_index, 1, 'dead', reason_class, reason_error,
			reason_at - interval '1 second', reason_at, reason_fingerprint FROM ` + q + `.items ORDER BY id`)
	exec(`INSERT INTO ` + q + `.run_counts (run_id, state, n) SELECT run_id, 'dead', count(*) FROM ` + q + `.items GROUP BY run_id`)
	// The failure counts as the store's writes leave them, folded to a
	// row per group as they come (postgres/sidevacuum.go, failuresAdded);
	// the triggers, off for this session, would leave a row per item and
	// per attempt, which no write of the store leaves.
	exec(`INSERT INTO ` + q + `.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
		SELECT pipeline, stage, coalesce(reason_class, ''), coalesce(reason_fingerprint, ''), run_id, state, count(*)
		FROM ` + q + `.items GROUP BY 1, 2, 3, 4, 5, 6
		UNION ALL SELECT pipeline, stage, class, fingerprint, run_id, 'failed', count(*)
		FROM ` + q + `.attempts WHERE fingerprint IS NOT NULL GROUP BY 1, 2, 3, 4, 5`)
	// No ANALYZE: the planner sees what autovacuum has gathered by the
	// time the bench asks, as an operator's database would right after a
	// surge of deaths.
}

// benchConsole times the console's requests on a loopback server over
// store s filled with causes.
func benchConsole(b *testing.B, s redrive.Store, causes []dlqCause) {
	srv := httptest.NewServer(web.NewHandler(s, web.Options{Token: token}))
	defer srv.Close()
	top := causes[0]
	rare := causes[len(causes)-1]
	fp := url.QueryEscape(rare.fp)
	requests := []struct{ name, path string }{
		{"dlq", "/api/v1/dlq?limit=50"},
		{"dlq-pipeline-stage", "/api/v1/dlq?limit=50&pipeline=" + top.pipeline + "&stage=" + top.stage},
		{"dlq-run-class", "/api/v1/dlq?limit=50&run=2&class=final"},
		{"dlq-fingerprint", "/api/v1/dlq?limit=50&fingerprint=" + fp},
		{"count", "/api/v1/count?state=dead"},
		{"count-pipeline", "/api/v1/count?state=dead&pipeline=" + top.pipeline},
		{"count-fingerprint", "/api/v1/count?state=dead&fingerprint=" + fp},
		{"errors", "/api/v1/errors"},
		{"errors-pipeline", "/api/v1/errors?pipeline=" + top.pipeline},
		{"errors-run", "/api/v1/errors?run=2"},
	}
	for _, r := range requests {
		b.Run(r.name, func(b *testing.B) {
			get := func() time.Duration {
				start := time.Now()
				resp, err := http.Get(srv.URL + r.path)
				if err != nil {
					b.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("GET %s: %d %v %s", r.path, resp.StatusCode, err, body)
				}
				if len(body) == 0 {
					b.Fatalf("GET %s: %s", r.path, body)
				}
				return time.Since(start)
			}
			get() // warm: the first read of a cold page cache is another bench
			var ds []time.Duration
			b.ResetTimer()
			for range b.N {
				ds = append(ds, get())
			}
			slices.Sort(ds)
			p50, top := ds[len(ds)/2], ds[len(ds)-1]
			b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(top.Microseconds())/1000, "max-ms")
			if p50 > dlqBudget {
				b.Errorf("GET %s: p50 %v, more than %v", r.path, p50, dlqBudget)
			}
		})
	}
}
