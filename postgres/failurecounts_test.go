package postgres_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// Purge, Redrive, RedriveFrom, CancelPending and the retention of
// finished runs and of succeeded items count what they add to or remove
// from failure_counts one row per group (migration 0027), completions what
// they add (0028), and the counts stay those of the items and attempts
// after every kind of each. A process whose schema lacks either migration
// leaves that counting to the triggers, without counting twice.
func TestBulkActionsCountFailuresByGroup(t *testing.T) {
	t.Parallel()
	for _, behind := range []int{0, 27, 28} {
		name := "migrated"
		if behind > 0 {
			name = fmt.Sprintf("schema without %04d", behind)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testBulkFailureCounts(t, behind)
		})
	}
}

// testBulkFailureCounts runs the actions on a schema that has every
// migration (behind 0) or none from behind on.
func testBulkFailureCounts(t *testing.T, behind int) {
	ctx := context.Background()
	url, schema := pgtest.NewSchema(t)
	s := pgtest.OpenStoreAt(t, url, schema)
	q := pgx.Identifier{schema}.Sanitize()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, strings.ReplaceAll(sql, "{schema}", q), args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	if behind > 0 {
		// The triggers as 0015 made them, and no record of the later
		// migrations: what a process of this build meets before
		// `redrive migrate up`.
		m, err := os.ReadFile("migrations/0015_failure_counts.sql")
		if err != nil {
			t.Fatal(err)
		}
		trgs := []string{"attempts_failure_insert"}
		if behind == 27 {
			trgs = append(trgs, "items_failure_update", "items_failure_delete", "attempts_failure_delete")
		}
		for _, trg := range trgs {
			table := strings.SplitN(trg, "_", 2)[0]
			create := string(m)[strings.Index(string(m), "CREATE TRIGGER "+trg):]
			create = create[:strings.Index(create, ";")+1]
			exec(`DROP TRIGGER ` + trg + ` ON {schema}.` + table)
			exec(create)
		}
		exec(`DELETE FROM {schema}.schema_migrations WHERE version >= $1`, behind)
		// A store opened now, without migrating, finds them unapplied.
		if s, err = postgres.Open(ctx, url, postgres.Options{Schema: schema}); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	}

	// Two pipelines; each dead item failed once before (a retry with a
	// fingerprint), in one of three errors; a fifth of each is pending,
	// for the steps to cancel.
	for _, p := range []string{"p", "q"} {
		run := mustRun(t, s, p)
		in := make([]redrive.NewItem, 400)
		for i := range in {
			in[i].Payload = []byte(`{}`)
		}
		enqueue(t, s, run, in...)
		for attempt := range 2 {
			ls := claim(t, s, p, 320, t0)
			cs := make([]redrive.Completion, len(ls))
			for i, l := range ls {
				cs[i] = done(l, redrive.StateDead, t0)
				e := fmt.Sprintf("%s failed: error %d of kind %d", p, i, i%3)
				cs[i].Record.Class, cs[i].Record.Error = []string{"timeout", "http", "final"}[i%3], e
				if attempt == 0 {
					cs[i].State, cs[i].Record.Outcome = redrive.StatePending, redrive.OutcomeRetry
					continue
				}
				cs[i].Reason = &redrive.Reason{Stage: "a", Class: cs[i].Record.Class, Error: e, Attempts: 2, At: t0}
			}
			if _, err := s.Complete(ctx, cs); err != nil {
				t.Fatal(err)
			}
		}
	}

	// truth counts the failures from the items and attempts themselves;
	// kept sums failure_counts; rows counts its rows.
	type key struct{ pipeline, stage, class, fp, kind string }
	read := func(sql string) map[key]int64 {
		t.Helper()
		rows, err := s.Pool().Query(ctx, strings.ReplaceAll(sql, "{schema}", q))
		if err != nil {
			t.Fatal(err)
		}
		out := map[key]int64{}
		var k key
		var n int64
		if _, err := pgx.ForEachRow(rows, []any{&k.pipeline, &k.stage, &k.class, &k.fp, &k.kind, &n}, func() error {
			out[k] += n
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	truth := func() map[key]int64 {
		return read(`SELECT pipeline, stage, coalesce(reason_class, ''), coalesce(reason_fingerprint, ''), state, count(*)
			FROM {schema}.items WHERE state IN ('dead', 'canceled') GROUP BY 1, 2, 3, 4, 5
			UNION ALL SELECT pipeline, stage, class, fingerprint, 'failed', count(*)
			FROM {schema}.attempts WHERE fingerprint IS NOT NULL GROUP BY 1, 2, 3, 4`)
	}
	kept := func() map[key]int64 {
		m := read(`SELECT pipeline, stage, class, fingerprint, kind, sum(n)::bigint FROM {schema}.failure_counts GROUP BY 1, 2, 3, 4, 5`)
		maps.DeleteFunc(m, func(_ key, n int64) bool { return n == 0 })
		return m
	}
	rows := func() int {
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+q+`.failure_counts`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if w := truth(); len(w) < 6 || !maps.Equal(kept(), w) {
		t.Fatalf("before the actions: kept %v, want %v", kept(), w)
	}
	// Each pipeline's retries fell in 3 groups, its deaths in 3 groups
	// of items and 3 of attempts: a row each from the completions that
	// count, a row per failure (640 attempts, 320 items) from the
	// triggers.
	if want := map[bool]int{true: 2 * (3 + 6), false: 2 * (640 + 320)}[behind == 0]; rows() != want {
		t.Fatalf("the completions left %d rows in failure_counts, want %d", rows(), want)
	}
	dead := []redrive.State{redrive.StateDead}
	both := []redrive.State{redrive.StateDead, redrive.StateCanceled}
	operator := redrive.Reason{Class: "canceled", Error: "by an operator", At: t0}
	steps := []struct {
		name string
		do   func() (int, error)
		want int
		dry  bool // changes nothing
	}{
		{"cancel 30 of p by limit", func() (int, error) {
			return s.CancelPending(ctx, redrive.ItemFilter{Pipeline: "p", Limit: 30}, operator)
		}, 30, false},
		{"cancel all pending", func() (int, error) {
			return s.CancelPending(ctx, redrive.ItemFilter{}, operator)
		}, 50 + 80, false},
		{"redrive 50 of p", func() (int, error) {
			return s.Redrive(ctx, redrive.ItemFilter{Pipeline: "p", States: dead, Limit: 50}, t0, 0)
		}, 50, false},
		{"redrive 20 of p from stage a", func() (int, error) {
			return s.RedriveFrom(ctx, redrive.RedriveFromRequest{Filter: redrive.ItemFilter{Pipeline: "p", States: dead, Limit: 20},
				Stage: "a", Now: t0})
		}, 20, false},
		{"dry run of a redrive from stage a", func() (int, error) {
			return s.RedriveFrom(ctx, redrive.RedriveFromRequest{Filter: redrive.ItemFilter{Pipeline: "p", States: dead},
				Stage: "a", Now: t0, DryRun: true})
		}, 320 - 50 - 20, true},
		{"purge 60 of p by limit", func() (int, error) {
			return s.Purge(ctx, redrive.ItemFilter{Pipeline: "p", States: both, Limit: 60})
		}, 60, false},
		{"purge 3 of q by ID", func() (int, error) {
			its, err := s.ListItems(ctx, redrive.ItemFilter{Pipeline: "q", States: dead, Limit: 3})
			if err != nil {
				return 0, err
			}
			return s.Purge(ctx, redrive.ItemFilter{IDs: []int64{its[0].ID, its[1].ID, its[2].ID}})
		}, 3, false},
		{"redrive all of q", func() (int, error) {
			return s.Redrive(ctx, redrive.ItemFilter{Pipeline: "q", States: both}, t0, 0)
		}, 317 + 80, false},
		{"retention of q's items, succeeded after their failures", func() (int, error) {
			ls := claim(t, s, "q", 400, t0)
			cs := make([]redrive.Completion, len(ls))
			for i, l := range ls {
				cs[i] = done(l, redrive.StateSucceeded, t0)
			}
			if _, err := s.Complete(ctx, cs); err != nil {
				return 0, err
			}
			return s.DeleteSucceeded(ctx, t0.Add(time.Hour), 0)
		}, 317 + 80, false},
		{"retention of p's finished run", func() (int, error) {
			if _, err := s.Pool().Exec(ctx, `UPDATE `+q+`.runs SET status = 'failed', finished_at = $1 WHERE pipeline = 'p'`, t0); err != nil {
				return 0, err
			}
			n, _, err := s.DeleteFinishedRuns(ctx, t0.Add(time.Hour), 100)
			return n, err
		}, 100, false},
		{"purge all", func() (int, error) {
			return s.Purge(ctx, redrive.ItemFilter{States: both})
		}, 320 + 80 - 50 - 20 - 60 - 100, false},
	}
	for _, st := range steps {
		before := rows()
		n, err := st.do()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if n != st.want {
			t.Errorf("%s: %d items, want %d", st.name, n, st.want)
		}
		if got, w := kept(), truth(); !maps.Equal(got, w) {
			t.Errorf("%s: failure_counts %v, want %v", st.name, got, w)
		}
		// A schema with 0027 adds a row per group (at most three errors
		// for items and three for their attempts, and the canceled group);
		// the triggers add one per item and one per failed attempt.
		added := rows() - before
		if st.dry && added != 0 {
			t.Errorf("%s: %d failure_counts rows added, want none", st.name, added)
			continue
		}
		if behind != 27 && added > 8 {
			t.Errorf("%s: %d failure_counts rows for %d items, want one per group", st.name, added, n)
		}
		if behind == 27 && added < n && !st.dry {
			t.Errorf("%s: %d failure_counts rows for %d items, want the triggers' one per item at least", st.name, added, n)
		}
	}
}
