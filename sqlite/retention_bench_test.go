package sqlite

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// fillSucceeded writes n succeeded items of one run with one succeeded
// attempt each, as the no-op benchmark leaves them, updated 1 µs apart
// from t0.
func fillSucceeded(tb testing.TB, s *Store, n int, t0 time.Time) {
	tb.Helper()
	ctx := context.Background()
	if _, err := s.w.ExecContext(ctx, `INSERT INTO runs (id, pipeline, status, created_at) VALUES (1, 'bench', 'running', ?)`, t0.UnixNano()); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
		INSERT INTO items (id, run_id, pipeline, stage, stage_index, state, attempt, payload, enqueued_at, next_at, order_at, updated_at, lease_token)
		SELECT i, 1, 'bench', 'stage1', 0, 'succeeded', 1, '{}', ?2, ?2, ?2, ?2 + i * 1000, 2 FROM n`, n, t0.UnixNano()); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, started_at, finished_at)
		SELECT id, 1, 'bench', 'stage1', 0, 1, 'succeeded', updated_at - 500, updated_at FROM items`); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkDeleteSucceeded1M deletes batches of succeeded items from a
// store of one million (with one attempt each), at the sizes a retention
// pass grows through, and reports the cost per deleted item. The sizes
// alternate within one store, so that the machine's load weighs on each
// alike. Each statement of a batch is timed too (the parts sum to a batch
// without DeleteSucceeded's own bookkeeping), so that it is seen which one
// dominates. Run it with -benchtime 5x: the store holds 1,000,000 items.
func BenchmarkDeleteSucceeded1M(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, filepath.Join(b.TempDir(), "bench.db"))
	t0 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	fillSucceeded(b, s, 1_000_000, t0)
	before := t0.Add(time.Hour)
	parts := []struct{ name, sql string }{
		{"select", `INSERT INTO temp.doomed (id) SELECT id FROM items INDEXED BY items_succeeded_updated
			WHERE state = 'succeeded' AND updated_at < ? ORDER BY updated_at LIMIT ?`},
		{"retained", `UPDATE runs SET retained = retained + d.n FROM (SELECT run_id, COUNT(*) AS n FROM items
			WHERE id IN (SELECT id FROM temp.doomed) GROUP BY run_id) AS d WHERE runs.id = d.run_id`},
		{"attempts", `DELETE FROM attempts WHERE item_id IN (SELECT id FROM temp.doomed)`},
		{"items", `DELETE FROM items WHERE id IN (SELECT id FROM temp.doomed)`},
		{"commit", `COMMIT`},
	}
	if _, err := s.w.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS doomed (id INTEGER PRIMARY KEY)`); err != nil {
		b.Fatal(err)
	}
	byParts := func(b *testing.B, size int) {
		c, err := s.w.Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		spent := make([]time.Duration, len(parts))
		n := 0
		for b.Loop() {
			if _, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
				b.Fatal(err)
			}
			if _, err := c.ExecContext(ctx, `DELETE FROM temp.doomed`); err != nil {
				b.Fatal(err)
			}
			for i, p := range parts {
				var args []any
				if i == 0 {
					args = []any{before.UnixNano(), size}
				}
				t := time.Now()
				if _, err := c.ExecContext(ctx, p.sql, args...); err != nil {
					b.Fatal(p.name, err)
				}
				spent[i] += time.Since(t)
			}
			n += size
		}
		for i, p := range parts {
			b.ReportMetric(float64(spent[i].Nanoseconds())/float64(n), p.name+"-ns/item")
		}
	}
	whole := func(b *testing.B, size int) {
		n := 0
		for b.Loop() {
			d, err := s.DeleteSucceeded(ctx, before, size)
			if err != nil || d != size {
				b.Fatalf("deleted %d, %v; want %d", d, err, size)
			}
			n += d
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/item")
	}
	for range 2 {
		for _, size := range []int{1000, 5000, 20000} {
			b.Run("batch="+strconv.Itoa(size), func(b *testing.B) { whole(b, size) })
			b.Run("parts/batch="+strconv.Itoa(size), func(b *testing.B) { byParts(b, size) })
		}
	}
}
