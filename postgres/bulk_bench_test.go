package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// BenchmarkBulkActionsAfterEmptiedVacuum times each operator's bulk action
// on 1,000 items of a store whose items were enqueued after the VACUUM of
// its emptied items table (see bulkActionsFixture), at two sizes, so that
// a cost that grows with the table shows; ms per action.
//
//	REDRIVE_TEST_POSTGRES=… go test ./postgres -run '^$' -bench BulkActionsAfterEmptiedVacuum -benchtime 1x
func BenchmarkBulkActionsAfterEmptiedVacuum(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{30000, 90000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			total := map[string]time.Duration{}
			for range b.N {
				s, _, _, _, _ := bulkActionsFixture(b, n)
				now := t0.Add(time.Minute)
				for _, a := range []struct {
					name string
					do   func() (int, error)
				}{
					{"retry-now", func() (int, error) { return s.RetryNow(ctx, redrive.ItemFilter{Pipeline: "p", Limit: 1000}, now) }},
					{"cancel-pending", func() (int, error) {
						return s.CancelPending(ctx, redrive.ItemFilter{Pipeline: "p", DueAfter: now, Limit: 1000},
							redrive.Reason{Class: "canceled", Error: "by an operator", At: now})
					}},
					{"redrive", func() (int, error) {
						return s.Redrive(ctx, redrive.ItemFilter{Pipeline: "p", Limit: 1000}, now, time.Second)
					}},
					{"redrive-from", func() (int, error) {
						return s.RedriveFrom(ctx, redrive.RedriveFromRequest{Filter: redrive.ItemFilter{Pipeline: "p", Limit: 1000}, Stage: "a", Now: now})
					}},
					{"purge", func() (int, error) { return s.Purge(ctx, redrive.ItemFilter{Pipeline: "p", Limit: 1000}) }},
				} {
					start := time.Now()
					got, err := a.do()
					if err != nil || got != 1000 {
						b.Fatalf("%s: %d, %v; want 1000", a.name, got, err)
					}
					total[a.name] += time.Since(start)
				}
			}
			for name, d := range total {
				b.ReportMetric(float64(d.Microseconds())/1000/float64(b.N), name+"-ms")
			}
		})
	}
}

// BenchmarkNotificationRedriveAfterEmptiedVacuum times RedriveNotifications
// of 1,000 of n dead notifications inserted after the VACUUM of a drained
// outbox (see emptyAndVacuum), at two sizes; ms per redrive.
//
//	REDRIVE_TEST_POSTGRES=… go test ./postgres -run '^$' -bench NotificationRedriveAfterEmptiedVacuum -benchtime 1x
func BenchmarkNotificationRedriveAfterEmptiedVacuum(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{5000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				s, schema := storeWithoutVacuum(b)
				outbox := pgx.Identifier{schema, "outbox"}.Sanitize()
				insertNotifications(b, s, outbox, 20000, "pending")
				emptyAndVacuum(b, s, outbox)
				insertNotifications(b, s, outbox, n, "dead")
				start := time.Now()
				got, err := s.RedriveNotifications(ctx, redrive.NotificationFilter{Limit: 1000}, t0.Add(time.Hour))
				total += time.Since(start)
				if err != nil || got != 1000 {
					b.Fatalf("RedriveNotifications: %d, %v; want 1000", got, err)
				}
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/redrive")
		})
	}
}

// BenchmarkNotificationSettleAfterEmptiedVacuum times SettleNotifications
// of 100 claimed notifications behind n pending ones inserted after the
// VACUUM of a drained outbox, at two sizes; ms per settle.
//
//	REDRIVE_TEST_POSTGRES=… go test ./postgres -run '^$' -bench NotificationSettleAfterEmptiedVacuum -benchtime 10x
func BenchmarkNotificationSettleAfterEmptiedVacuum(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{20000, 60000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s, schema := storeWithoutVacuum(b)
			outbox := pgx.Identifier{schema, "outbox"}.Sanitize()
			insertNotifications(b, s, outbox, 20000, "pending")
			emptyAndVacuum(b, s, outbox)
			insertNotifications(b, s, outbox, n, "pending")
			now := t0.Add(time.Hour)
			var total time.Duration
			for range b.N {
				ns, err := s.ClaimNotifications(ctx, redrive.ClaimRequest{Owner: "w", Pipelines: []string{"p"}, Limit: 100, Now: now, LeaseUntil: now.Add(time.Minute)})
				if err != nil || len(ns) != 100 {
					b.Fatalf("ClaimNotifications: %d, %v; want 100", len(ns), err)
				}
				rs := make([]redrive.DeliveryResult, len(ns))
				for i, x := range ns {
					rs[i] = redrive.DeliveryResult{ID: x.ID, Token: x.Token, Status: redrive.NotificationDelivered, Attempts: 1, Now: now}
				}
				start := time.Now()
				if _, err := s.SettleNotifications(ctx, rs); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/settle")
		})
	}
}

// BenchmarkDeleteDeliveredAfterEmptiedVacuum times the outbox's retention,
// DeleteDelivered in batches of 2,000, over n delivered notifications
// inserted after the VACUUM of a drained outbox (see emptyAndVacuum), and,
// as "analyzed", the same once ANALYZE has run; ms per batch, all of them
// deleted.
//
//	REDRIVE_TEST_POSTGRES=… go test ./postgres -run '^$' -bench DeleteDeliveredAfterEmptiedVacuum -benchtime 1x
func BenchmarkDeleteDeliveredAfterEmptiedVacuum(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{50000, 200000} {
		for _, analyzed := range []bool{false, true} {
			name := fmt.Sprint(n)
			if analyzed {
				name += "/analyzed"
			}
			b.Run(name, func(b *testing.B) {
				var total time.Duration
				batches := 0
				for range b.N {
					s, schema := storeWithoutVacuum(b)
					outbox := pgx.Identifier{schema, "outbox"}.Sanitize()
					insertNotifications(b, s, outbox, 20000, "pending")
					emptyAndVacuum(b, s, outbox)
					insertNotifications(b, s, outbox, n, "delivered")
					if analyzed {
						if _, err := s.Pool().Exec(ctx, `ANALYZE `+outbox); err != nil {
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
}

// BenchmarkDeleteSucceededRetried times a retention batch (DeleteSucceeded)
// of 20,000 succeeded items that each failed once before ("retried"),
// whose failed attempts leave their failure groups with the items, and of
// as many that never failed ("clean"): on the migrated schema one
// failure_counts row per group ("grouped"), and with the schema's record
// of migration 0027 removed, as a process running ahead of its schema sees
// it, by the triggers, one call and one row per failed attempt
// ("triggers"); ms per batch.
//
//	REDRIVE_TEST_POSTGRES=… go test ./postgres -run '^$' -bench DeleteSucceededRetried -benchtime 3x
func BenchmarkDeleteSucceededRetried(b *testing.B) {
	ctx := context.Background()
	const n = 20000
	for _, v := range []string{"retried/grouped", "retried/triggers", "clean/grouped", "clean/triggers"} {
		shape, counting, _ := strings.Cut(v, "/")
		b.Run(v, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				url, schema := pgtest.NewSchema(b)
				s := pgtest.OpenStoreAt(b, url, schema)
				run := mustRun(b, s, "p")
				in := make([]redrive.NewItem, n)
				for i := range in {
					in[i].Payload = []byte(`{}`)
				}
				enqueue(b, s, run, in...)
				states := []redrive.State{redrive.StatePending, redrive.StateSucceeded}
				if shape == "clean" {
					states = states[1:]
				}
				for _, state := range states {
					for left := n; left > 0; {
						ls := claim(b, s, "p", 2000, t0)
						cs := make([]redrive.Completion, len(ls))
						for i, l := range ls {
							cs[i] = done(l, state, t0)
							if state == redrive.StatePending {
								cs[i].Record.Outcome, cs[i].Record.Class = redrive.OutcomeRetry, "timeout"
								cs[i].Record.Error = fmt.Sprintf("read tcp: i/o timeout after %d ms", i)
							}
						}
						if _, err := s.Complete(ctx, cs); err != nil {
							b.Fatal(err)
						}
						left -= len(ls)
					}
				}
				if counting == "triggers" {
					if _, err := s.Pool().Exec(ctx, `DELETE FROM `+pgx.Identifier{schema, "schema_migrations"}.Sanitize()+` WHERE version = 27`); err != nil {
						b.Fatal(err)
					}
					var err error
					if s, err = postgres.Open(ctx, url, postgres.Options{Schema: schema}); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				got, err := s.DeleteSucceeded(ctx, t0.Add(time.Hour), n)
				if err != nil || got != n {
					b.Fatalf("DeleteSucceeded: %d, %v; want %d", got, err, n)
				}
				total += time.Since(start)
				if counting == "triggers" {
					s.Close()
				}
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "batch-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
