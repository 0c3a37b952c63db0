package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
)

// BenchmarkTimeline1M measures the timeline query on a store of one million
// attempts spread evenly over 24 hours (2 pipelines, 5 stages each, 10 runs
// of 2.4 hours): the last hour by minute (about 41,700 attempts), the last
// hour of one pipeline, one run, and the whole day by half hour. Then, in
// the same run, the last hour without the attempts_timeline index, and what
// the index costs an insert of 100,000 attempts.
func BenchmarkTimeline1M(b *testing.B) {
	ctx := context.Background()
	url, schema := pgtest.NewSchema(b)
	s := pgtest.OpenStoreAt(b, url, schema)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	tbl := pgx.Identifier{schema, "attempts"}.Sanitize()
	day0 := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	exec := func(sql string, args ...any) time.Duration {
		start := time.Now()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	insert := func(from, n int) time.Duration {
		// Attempt i finishes at day0 + i * 86.4 ms.
		return exec(`INSERT INTO `+tbl+` (item_id, run_id, pipeline, stage, stage_index, number, outcome, started_at, finished_at)
			SELECT i, 1 + (i % 1000000) / 100000, 'p' || (i % 2), 's' || (i % 5), i % 5, 1,
				CASE i % 10 WHEN 0 THEN 'retry' WHEN 1 THEN 'dead' WHEN 2 THEN 'rate_limited' ELSE 'succeeded' END,
				$1::timestamptz + (i % 1000000) * interval '86.4 ms' - interval '1 s', $1::timestamptz + (i % 1000000) * interval '86.4 ms'
			FROM generate_series($2::bigint, $2::bigint + $3::bigint - 1) i`, day0, from, n)
	}
	insert(0, 1_000_000)
	exec(`VACUUM ANALYZE ` + tbl)
	end := day0.Add(24 * time.Hour)
	lastHour := redrive.TimelineFilter{Since: end.Add(-time.Hour), Until: end, Step: time.Minute}
	query := func(b *testing.B, f redrive.TimelineFilter, want int) {
		for b.Loop() {
			bs, err := s.Timeline(ctx, f)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, x := range bs {
				n += x.Attempts
			}
			if n < want*99/100 || n > want*101/100 {
				b.Fatalf("%d attempts, want about %d", n, want)
			}
		}
	}
	b.Run("last-hour", func(b *testing.B) { query(b, lastHour, 41_667) })
	b.Run("last-hour-one-pipeline", func(b *testing.B) {
		f := lastHour
		f.Pipeline = "p0"
		query(b, f, 20_833)
	})
	b.Run("one-run", func(b *testing.B) {
		query(b, redrive.TimelineFilter{RunID: 5, Since: day0.Add(9 * time.Hour).Add(-time.Minute), Until: day0.Add(12 * time.Hour), Step: 5 * time.Minute}, 100_000)
	})
	b.Run("whole-day", func(b *testing.B) {
		query(b, redrive.TimelineFilter{Since: day0, Until: end, Step: 30 * time.Minute}, 1_000_000)
	})
	withIndex := insert(1_000_000, 100_000)
	exec(`DROP INDEX ` + pgx.Identifier{schema, "attempts_timeline"}.Sanitize())
	withoutIndex := insert(1_100_000, 100_000)
	exec(`VACUUM ANALYZE ` + tbl)
	b.Run("last-hour-no-index", func(b *testing.B) { query(b, lastHour, 41_667) })
	b.Logf("inserting 100,000 attempts: %v with the timeline index, %v without (ratio %.2f)", withIndex, withoutIndex, float64(withIndex)/float64(withoutIndex))
}
