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
	url, schema := pgtest.NewSchema(t)
	ctx := context.Background()
	s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, Migrate: true, VacuumAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
