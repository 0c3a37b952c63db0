package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// The store vacuums its items table itself once retention has deleted
// Options.VacuumAfter items, and never with a negative VacuumAfter. The
// VACUUM runs in the background under the store's context: the caller's
// context canceled right after the delete returns does not cancel it.
func TestRetentionVacuums(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		after int
		want  bool
	}{{5, true}, {-1, false}} {
		url, schema := pgtest.NewSchema(t)
		ctx := context.Background()
		s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, Migrate: true, VacuumAfter: tc.after})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		run := mustRun(t, s, "p")
		enqueue(t, s, run, make([]redrive.NewItem, 10)...)
		var cs []redrive.Completion
		for _, l := range claim(t, s, "p", 10, t0) {
			cs = append(cs, done(l, redrive.StateSucceeded, t0))
		}
		if _, err := s.Complete(ctx, cs); err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithCancel(ctx)
		n, err := s.DeleteSucceeded(dctx, t0.Add(time.Hour), 0)
		cancel()
		if err != nil || n != 10 {
			t.Fatalf("DeleteSucceeded = %d, %v; want 10", n, err)
		}
		if err := postgres.WaitVacuum(ctx, s); err != nil {
			t.Fatal(err)
		}
		var vacuums int64
		if err := s.Pool().QueryRow(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'items'`,
			schema).Scan(&vacuums); err != nil {
			t.Fatal(err)
		}
		if got := vacuums > 0; got != tc.want {
			t.Errorf("VacuumAfter %d: items vacuumed %d times after 10 deleted items, want vacuumed = %v", tc.after, vacuums, tc.want)
		}
	}
}

// Retention deletes the attempts of the items it deletes through
// attempts_item whatever the statistics say: on a table never vacuumed
// nor analyzed the planner chose to scan all of attempts for every batch,
// and once a VACUUM had set the statistics, a semi-join that walked all of
// attempts_item once per deleted item.
func TestRetentionPlanAfterVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, schema := storeWithoutVacuum(t)
	run := mustRun(t, s, "p")
	enqueue(t, s, run, make([]redrive.NewItem, 200)...)
	var cs []redrive.Completion
	for _, l := range claim(t, s, "p", 200, t0) {
		cs = append(cs, done(l, redrive.StateSucceeded, t0))
	}
	if _, err := s.Complete(ctx, cs); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		plan, err := postgres.RetentionPlan(ctx, s, t0.Add(time.Hour), 20000)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Delete on attempts", "Index Cond: (item_id = ANY"} {
			if !strings.Contains(plan, want) {
				t.Errorf("%s: retention's plan has no %q:\n%s", when, want, plan)
			}
		}
		for _, bad := range []string{"Semi Join", "Seq Scan on attempts"} {
			if strings.Contains(plan, bad) {
				t.Errorf("%s: retention's plan has a %q:\n%s", when, bad, plan)
			}
		}
	}
	check("never vacuumed")
	if _, err := s.Pool().Exec(ctx, `VACUUM `+schema+`.items, `+schema+`.attempts`); err != nil {
		t.Fatal(err)
	}
	check("vacuumed")
}

// DeleteFinishedRuns reaches the items of a finished run through
// items_run_state, driven by the runs, and the attempts of the items it
// deletes through attempts_item, whatever the statistics: on tables never
// vacuumed nor analyzed, after a VACUUM, and after the VACUUM of an
// emptied items table (see TestLeaseWritePlansAfterEmptiedVacuum); never by a
// sequential scan or a full index walk of a table whose size is the
// store's, not the batch's.
func TestFinishedRunsPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, emptied := range []bool{false, true} {
		s, schema := storeWithoutVacuum(t)
		running := mustRun(t, s, "q")
		if emptied {
			emptyItems(t, s, schema, running)
		}
		finished := mustRun(t, s, "p")
		enqueue(t, s, finished, make([]redrive.NewItem, 200)...)
		var cs []redrive.Completion
		for _, l := range claim(t, s, "p", 200, t0) {
			cs = append(cs, done(l, redrive.StateSucceeded, t0))
		}
		if _, err := s.Complete(ctx, cs); err != nil {
			t.Fatal(err)
		}
		if err := s.SetRunStatus(ctx, finished.ID, redrive.RunCompleted, "", t0); err != nil {
			t.Fatal(err)
		}
		enqueue(t, s, running, make([]redrive.NewItem, 2000)...)
		check := func(when string) {
			t.Helper()
			items, runs, err := postgres.FinishedRunsPlans(ctx, s, t0.Add(time.Hour), 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"(run_id = r.id)", "Delete on attempts", "Index Cond: (item_id = ANY"} {
				if !strings.Contains(items, want) {
					t.Errorf("%s: the items statement's plan has no %q:\n%s", when, want, items)
				}
			}
			if !strings.Contains(runs, "(run_id = r.id)") {
				t.Errorf("%s: the runs statement does not look up the items of each run:\n%s", when, runs)
			}
			for name, plan := range map[string]string{"items": items, "runs": runs} {
				for _, bad := range []string{"Seq Scan on items", "Seq Scan on attempts", "Seq Scan on action_items", "Join"} {
					if strings.Contains(plan, bad) {
						t.Errorf("%s: the %s statement's plan has a %q:\n%s", when, name, bad, plan)
					}
				}
			}
		}
		when := "never vacuumed"
		if emptied {
			when = "after the VACUUM of an emptied table"
		}
		check(when)
		if _, err := s.Pool().Exec(ctx, `VACUUM `+schema+`.items, `+schema+`.attempts, `+schema+`.runs`); err != nil {
			t.Fatal(err)
		}
		check(when + ", then vacuumed")
		n, r, err := s.DeleteFinishedRuns(ctx, t0.Add(time.Hour), 0)
		if err != nil || n != 200 || r != 1 {
			t.Fatalf("%s: DeleteFinishedRuns = %d items, %d runs, %v; want 200, 1", when, n, r, err)
		}
	}
}
