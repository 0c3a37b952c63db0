package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// A claim walks the ready items in claim order and stops after its batch,
// and promotion walks the waiting items by due time, whatever the
// statistics say: none at all, or statistics taken while every item
// waited. Left to the planner, both cases sorted every ready item.
func TestClaimPlanIgnoresStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "plan")
	// 6,000 items (no statistics are taken on the way), 5,000
	// of them waiting on a backoff.
	for range 6 {
		in := make([]redrive.NewItem, 1000)
		for i := range in {
			in[i].Payload = []byte(`{}`)
		}
		enqueue(t, s, run, in...)
	}
	now := t0.Add(time.Minute)
	ls := claim(t, s, "plan", 5000, now)
	cs := make([]redrive.Completion, len(ls))
	for i, l := range ls {
		cs[i] = done(l, redrive.StatePending, now)
		cs[i].NextAt = now.Add(time.Hour)
	}
	if _, err := s.Complete(ctx, cs); err != nil {
		t.Fatal(err)
	}
	req := redrive.ClaimRequest{Owner: "w", Pipelines: []string{"plan"}, Limit: 100, Now: now, LeaseUntil: now.Add(time.Minute),
		Exclude: []redrive.StageKey{{Pipeline: "plan", Stage: "b"}}}
	check := func(when string) {
		t.Helper()
		promote, claim, err := postgres.ClaimPlans(ctx, s, req, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ name, plan, index string }{{"promote", promote, "items_waiting"}, {"claim", claim, "items_ready"}} {
			if !strings.Contains(c.plan, "Index Scan using "+c.index) || strings.Contains(c.plan, "Sort") || strings.Contains(c.plan, "Bitmap") {
				t.Errorf("%s, %s plan:\n%s\nwant an ordered walk of %s", when, c.name, c.plan, c.index)
			}
		}
		if _, bare, err := postgres.ClaimPlans(ctx, s, req, true); err == nil {
			t.Logf("%s, the planner's own claim plan:\n%s", when, bare)
		}
	}
	check("no statistics")
	if _, err := s.Pool().Exec(ctx, `ANALYZE `+pgx.Identifier{s.Schema(), "items"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	check("statistics of a waiting backlog")
	if got := claim(t, s, "plan", 100, now); len(got) != 100 {
		t.Fatalf("claimed %d of 1,000 due items, want 100", len(got))
	}
}
