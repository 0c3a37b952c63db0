package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// BenchmarkTimeline1M measures the timeline query on a store of one million
// attempts spread evenly over 24 hours (2 pipelines, 5 stages each, 10 runs
// of 2.4 hours): the last hour by minute (about 41,700 attempts), the last
// hour of one pipeline, one run by its default step, and the whole day by
// half hour. Then, in the same run, the last hour without the
// attempts_timeline index, and what the index costs an insert of 100,000
// attempts, so that the ratios are not skewed by the load of a shared
// machine.
func BenchmarkTimeline1M(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, filepath.Join(b.TempDir(), "bench.db"))
	day0 := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	insert := func(from, n int) time.Duration {
		start := time.Now()
		// Attempt i finishes at day0 + i * 86.4 ms.
		_, err := s.w.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1 + ?2)
			INSERT INTO attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, started_at, finished_at)
			SELECT i, 1 + (i % 1000000) / 100000, 'p' || (i % 2), 's' || (i % 5), i % 5, 1,
				CASE i % 10 WHEN 0 THEN 'retry' WHEN 1 THEN 'dead' WHEN 2 THEN 'rate_limited' ELSE 'succeeded' END,
				?3 + (i % 1000000) * 86400000 - 1000000000, ?3 + (i % 1000000) * 86400000
			FROM n`, from, n, day0.UnixNano())
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	insert(0, 1_000_000)
	if _, err := s.w.ExecContext(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
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
	if _, err := s.w.ExecContext(ctx, `DROP INDEX attempts_timeline`); err != nil {
		b.Fatal(err)
	}
	withoutIndex := insert(1_100_000, 100_000)
	b.Run("last-hour-no-index", func(b *testing.B) {
		for b.Loop() {
			// The store names its index; without it, the same query.
			rows, err := s.r.QueryContext(ctx, `SELECT pipeline, stage, (finished_at - ?1) / ?2 AS b, count(*)
				FROM attempts WHERE finished_at >= ?1 AND finished_at < ?3 GROUP BY pipeline, stage, b`,
				lastHour.Since.UnixNano(), int64(lastHour.Step), lastHour.Until.UnixNano())
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
			}
			rows.Close()
		}
	})
	b.Logf("inserting 100,000 attempts: %v with the timeline index, %v without (ratio %.2f)", withIndex, withoutIndex, float64(withIndex)/float64(withoutIndex))
}
