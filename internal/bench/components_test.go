package bench

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/sqlite"
)

// componentsItems is how many items each variant of the component
// benchmarks claims and completes.
const componentsItems = 40000

// A schema variant: DDL run on a fresh store before its items are
// enqueued, to price what it drops. The variants only measure; the store
// never runs without these objects.
type schemaVariant struct{ name, ddl string }

// BenchmarkSQLiteComponents prices the parts of the SQLite schema that a
// claim and a completion maintain, by dropping them from a scratch store:
// Claim and Complete of componentsItems items in batches of 2,000 (and
// 500, the full schema), in one goroutine, reported as CPU µs per item.
//
//	go test ./internal/bench -run '^$' -bench SQLiteComponents -benchtime 1x
func BenchmarkSQLiteComponents(b *testing.B) {
	itemTriggers := `DROP TRIGGER items_outbox_update; DROP TRIGGER items_callback_update; DROP TRIGGER items_failure_update;`
	itemIndexes := `DROP INDEX items_run_state; DROP INDEX items_succeeded_updated; DROP INDEX items_dlq; DROP INDEX items_cause;
		DROP INDEX items_fingerprint; DROP INDEX items_fingerprint_todo; DROP INDEX items_ready_early;`
	attemptIndexes := `DROP INDEX attempts_timeline; DROP INDEX attempts_cause; DROP INDEX attempts_fingerprint_todo;`
	for _, v := range []schemaVariant{
		{"full", ""},
		{"batch500", ""},
		{"no_item_update_triggers", itemTriggers},
		{"no_item_console_indexes", itemIndexes},
		{"no_attempt_console_indexes", attemptIndexes},
		{"none_of_these", itemTriggers + itemIndexes + attemptIndexes},
	} {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			for range b.N {
				path := filepath.Join(b.TempDir(), "c.db")
				s, err := sqlite.Open(ctx, path)
				if err != nil {
					b.Fatal(err)
				}
				if v.ddl != "" {
					db, err := sql.Open("sqlite", path)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := db.Exec(v.ddl); err != nil {
						b.Fatal(err)
					}
					db.Close()
				}
				batch := 2000
				if v.name == "batch500" {
					batch = 500
				}
				componentsRun(b, s, "", batch)
				s.Close()
			}
		})
	}
	b.Run("audited_loop", func(b *testing.B) {
		for range b.N {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "c.db"))
			if err != nil {
				b.Fatal(err)
			}
			auditedComponents(b, s, "")
			s.Close()
		}
	})
}

// BenchmarkPostgresComponents is BenchmarkSQLiteComponents on PostgreSQL
// (REDRIVE_TEST_POSTGRES), with the server backends' CPU time counted
// apart (server-µs/item; read from /proc, so the server must run on this
// host).
//
//	go test ./internal/bench -run '^$' -bench PostgresComponents -benchtime 1x
func BenchmarkPostgresComponents(b *testing.B) {
	itemTriggers := `DROP TRIGGER items_count_update ON items; DROP TRIGGER items_outbox_update ON items;
		DROP TRIGGER items_failure_update ON items;`
	itemIndexes := `DROP INDEX items_run_state; DROP INDEX items_succeeded_updated; DROP INDEX items_dlq; DROP INDEX items_cause;
		DROP INDEX items_fingerprint; DROP INDEX items_fingerprint_todo; DROP INDEX items_ready_early;`
	attemptIndexes := `DROP INDEX attempts_timeline; DROP INDEX attempts_cause; DROP INDEX attempts_fingerprint_todo;
		DROP TRIGGER attempts_failure_insert ON attempts;`
	for _, v := range []schemaVariant{
		{"full", ""},
		{"batch500", ""},
		{"no_item_update_triggers", itemTriggers},
		{"no_item_console_indexes", itemIndexes},
		{"no_attempt_console_indexes", attemptIndexes},
		{"none_of_these", itemTriggers + itemIndexes + attemptIndexes},
		// Without items_run_state: what issue 21's point 2 could save.
		{"no_run_state", `DROP INDEX items_run_state`},
		// The outbox's trigger alone (the run counts' trigger keeps the
		// transition tables captured) and both (none captured).
		{"no_outbox_trigger", `DROP TRIGGER items_outbox_update ON items`},
		{"no_transition_tables", `DROP TRIGGER items_outbox_update ON items; DROP TRIGGER items_count_update ON items`},
	} {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			for range b.N {
				url, schema := pgtest.NewSchema(b)
				s := pgtest.OpenStoreAt(b, url, schema)
				if v.ddl != "" {
					if _, err := s.Pool().Exec(ctx, `SET search_path TO `+pgx.Identifier{schema}.Sanitize()+`; `+v.ddl+`; RESET search_path`); err != nil {
						b.Fatal(err)
					}
				}
				batch := 2000
				if v.name == "batch500" {
					batch = 500
				}
				componentsRun(b, s, schema, batch)
			}
		})
	}
	// The audited loop as documented, then on a job row as wide as the
	// items' (auditedWide), without and with the items' claim-path
	// indexes: whether a narrow table of active items would pay.
	for _, v := range []schemaVariant{
		{"audited_loop", ""},
		{"audited_wide_row", auditedWide},
		{"audited_wide_row_indexed", auditedWide + "; " + auditedWideIndexes},
		{"audited_narrow_row_indexed", `ALTER TABLE bare_jobs ADD COLUMN run_id bigint NOT NULL DEFAULT 1; ` + auditedWideIndexes},
	} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				url, schema := pgtest.NewSchema(b)
				s := pgtest.OpenStoreAt(b, url, schema)
				_, c, err := auditedPostgres(context.Background(), s, schema, componentsItems, 2000, 1, []byte(`{}`), v.ddl)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(c.ProcessCPU, "loop-µs/item")
				b.ReportMetric(c.ServerCPU, "loop-server-µs/item")
				b.ReportMetric(0, "ns/op")
			}
		})
	}
}

// auditedComponents reports the CPU time per item of the audited bare
// loop, one loop in batches of 2,000, on store's server or file: claim
// and completion together.
func auditedComponents(b *testing.B, store redrive.Store, schema string) {
	_, c, err := Audited(context.Background(), store, schema, componentsItems, 2000, 1, []byte(`{}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(c.ProcessCPU, "loop-µs/item")
	if schema != "" {
		b.ReportMetric(c.ServerCPU, "loop-server-µs/item")
	}
	b.ReportMetric(0, "ns/op")
}

// componentsRun enqueues componentsItems items into store, then claims
// and completes them in batches of batch, as a succeeded no-op attempt
// each, and reports the CPU time of claims and of completions per item.
func componentsRun(b *testing.B, store redrive.Store, schema string, batch int) {
	ctx := context.Background()
	componentsFill(b, store)
	var claimSelf, claimServer, doneSelf, doneServer time.Duration
	b.ResetTimer()
	for left := componentsItems; left > 0; {
		now := time.Now()
		m := startCPU(ctx, store, schema)
		ls, err := store.Claim(ctx, redrive.ClaimRequest{Owner: "c", Pipelines: []string{"p"}, Limit: batch,
			LeaseUntil: now.Add(time.Minute), Now: now})
		if err != nil {
			b.Fatal(err)
		}
		self, server := m.stop(ctx)
		claimSelf, claimServer = claimSelf+self, claimServer+server
		if len(ls) == 0 {
			b.Fatalf("%d items left, none claimed", left)
		}
		cs := make([]redrive.Completion, len(ls))
		for i, l := range ls {
			cs[i] = componentsSuccess(l.Item.ID, l.Token, now)
			cs[i].Payload = l.Item.Payload
		}
		m = startCPU(ctx, store, schema)
		applied, err := store.Complete(ctx, cs)
		if err != nil {
			b.Fatal(err)
		}
		self, server = m.stop(ctx)
		doneSelf, doneServer = doneSelf+self, doneServer+server
		for i, ok := range applied {
			if !ok {
				b.Fatalf("completion of item %d not applied", cs[i].ItemID)
			}
		}
		left -= len(ls)
	}
	b.StopTimer()
	b.ReportMetric(perItem(claimSelf, componentsItems), "claim-µs/item")
	b.ReportMetric(perItem(doneSelf, componentsItems), "complete-µs/item")
	if schema != "" {
		b.ReportMetric(perItem(claimServer, componentsItems), "claim-server-µs/item")
		b.ReportMetric(perItem(doneServer, componentsItems), "complete-server-µs/item")
	}
	b.ReportMetric(0, "ns/op")
}

// componentsFill enqueues componentsItems items of pipeline "p", stage
// "a", into a new run of store.
func componentsFill(b *testing.B, store redrive.Store) {
	ctx := context.Background()
	run, _, err := store.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	in := make([]redrive.NewItem, componentsItems)
	for i := range in {
		in[i].Payload = []byte(`{}`)
	}
	if _, err := store.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Items: in, Now: time.Now()}); err != nil {
		b.Fatal(err)
	}
}

// componentsSuccess is the completion of a succeeded first attempt at
// stage "a" of the item leased with token, at now.
func componentsSuccess(id, token int64, now time.Time) redrive.Completion {
	return redrive.Completion{ItemID: id, Token: token, State: redrive.StateSucceeded, Stage: "a", Attempt: 1, Now: now,
		Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeSucceeded, StartedAt: now, FinishedAt: now}}
}
