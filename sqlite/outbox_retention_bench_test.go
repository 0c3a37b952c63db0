package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkDeleteDelivered times the outbox's retention, DeleteDelivered
// in batches of 2,000, over n delivered notifications behind 5,000 older
// pending ones; ms per batch, all of them deleted.
//
//	go test ./sqlite -run '^$' -bench DeleteDelivered -benchtime 1x
func BenchmarkDeleteDelivered(b *testing.B) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	for _, n := range []int{50000, 200000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var total time.Duration
			batches := 0
			for range b.N {
				s := openTest(b, filepath.Join(b.TempDir(), "bench.db"))
				for _, g := range []struct {
					n      int
					status string
				}{{5000, "pending"}, {n, "delivered"}} {
					if _, err := s.w.ExecContext(ctx, `WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?1)
						INSERT INTO outbox (delivery_id, event, pipeline, run_id, occurred_at, next_at, updated_at, status)
						SELECT ?3 || i, 'item.dead', 'p', 1, ?2, ?2 + i * 1000000, ?2, ?3 FROM g`, g.n, t0.UnixNano(), g.status); err != nil {
						b.Fatal(err)
					}
				}
				for left := n; left > 0; {
					start := time.Now()
					got, err := s.DeleteDelivered(ctx, t0.Add(time.Hour), 2000)
					total += time.Since(start)
					if err != nil || got != min(2000, left) {
						b.Fatalf("DeleteDelivered: %d, %v; want %d", got, err, min(2000, left))
					}
					left -= got
					batches++
				}
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(batches), "ms/batch")
		})
	}
}
