package postgres_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
)

// BenchmarkSingleCompletions measures completions sent one per statement
// by 32 callers at once, as external workers settle their results: of
// leases all from one claim ("one claim"), and of leases each from a claim
// of its own ("a claim each"), whose completions share no row. Each
// iteration is one completion; it reports completions a second. Run with
// -benchtime Nx: the setup claims N items.
func BenchmarkSingleCompletions(b *testing.B) {
	for _, c := range []struct {
		name string
		per  int // leases per claim; 0: all in one
	}{{"one claim", 0}, {"a claim each", 1}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			s := pgtest.OpenStore(b)
			run := mustRun(b, s, "p")
			in := make([]redrive.NewItem, b.N)
			enqueue(b, s, run, in...)
			per := c.per
			if per == 0 {
				per = b.N
			}
			var ls []redrive.Lease
			for len(ls) < b.N {
				got := claim(b, s, "p", min(per, b.N-len(ls)), t0)
				if len(got) == 0 {
					b.Fatalf("claim: none of %d items left", b.N-len(ls))
				}
				ls = append(ls, got...)
			}
			var next atomic.Int64
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0))) // 32 callers
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l := ls[next.Add(1)-1]
					applied, err := s.Complete(ctx, []redrive.Completion{done(l, redrive.StateSucceeded, t0.Add(time.Second))})
					if err != nil || !applied[0] {
						b.Errorf("complete %d: %v, %v", l.Item.ID, applied, err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "completions/s")
		})
	}
}
