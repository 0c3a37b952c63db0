package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// A listing by run walks items_run_state (run_id, state, id) from the
// cursor whatever the planner knows. Left to its statistics, ListItems
// walked items_pkey and filtered by run: on the run's last page, short of
// its LIMIT, through every later run's items to the end of the table.
// Without statistics it took the whole run by a bitmap scan and sorted it,
// on every page. Running items, stored pending (migration 0029), are
// looked up by ID among the items of the claims' batches, never walked
// among the run's pending ones.
func TestListItemsByRunWalksIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.NewSchema(t)
	s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := mustRun(t, s, "walk")
	var in []redrive.NewItem
	for range 600 {
		in = append(in, redrive.NewItem{Payload: []byte(`{}`)})
	}
	ids := enqueue(t, s, run, in...)
	// Half the run succeeds, so that two of its states hold items.
	ls := claim(t, s, "walk", 300, t0)
	var cs []redrive.Completion
	for _, l := range ls {
		cs = append(cs, redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StateSucceeded, Stage: "a", Attempt: 1, Now: t0,
			Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeSucceeded, StartedAt: t0, FinishedAt: t0}})
	}
	if _, err := s.Complete(ctx, cs); err != nil {
		t.Fatal(err)
	}
	later := mustRun(t, s, "later")
	in = in[:0]
	for range 20_000 {
		in = append(in, redrive.NewItem{Payload: []byte(`{}`)})
	}
	enqueue(t, s, later, in...)

	last := ids[len(ids)-40].ID // the last page: 39 items, short of the limit
	filters := []redrive.ItemFilter{
		{RunID: run.ID, AfterID: last, Limit: 101},
		{RunID: run.ID, States: []redrive.State{redrive.StatePending}, AfterID: last, Limit: 101},
		{RunID: run.ID, States: []redrive.State{redrive.StateSucceeded, redrive.StateDead}, Limit: 101},
	}
	check := func(when string) {
		t.Helper()
		for _, f := range filters {
			for _, generic := range []bool{false, true} {
				plan, err := postgres.ListItemsPlan(ctx, s, f, generic)
				if err != nil {
					t.Fatal(err)
				}
				if bad := runWalkFault(plan); bad != "" {
					t.Errorf("%s, filter %+v (generic %v):\n%s\nwant walks of items_run_state from the cursor only: %s", when, f, generic, plan, bad)
				}
			}
		}
	}
	check("without statistics")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `ANALYZE `+pgx.Identifier{schema, "items"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	check("with statistics")
}

// runWalkFault says what in a plan of a listing by run reads more than
// its pages: a scan of items that is not an index range from the cursor
// or a lookup of the batches' IDs, a bitmap scan, rows of items filtered
// out, or a sort of more than a page.
func runWalkFault(plan string) string {
	if !strings.Contains(plan, "items_run_state") {
		return "no walk of items_run_state"
	}
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		switch {
		case strings.Contains(l, "Bitmap"):
			return "a bitmap scan"
		case strings.Contains(l, "Seq Scan on items"):
			return "a scan of all items"
		case strings.Contains(l, "Index Scan using items_"):
			if i+1 >= len(lines) || !strings.Contains(lines[i+1], "Index Cond") ||
				!strings.Contains(lines[i+1], "id >") && !strings.Contains(lines[i+1], "id = ANY") {
				return "an index scan not bounded by the cursor or the batches: " + strings.TrimSpace(l)
			}
		case strings.Contains(l, "Rows Removed by Filter"):
			// Only the batches, the ledger of the leases, are filtered.
			if !strings.Contains(lines[max(0, i-2)], "lease_batches") && !strings.Contains(lines[max(0, i-1)], "lease_batches") {
				return "rows filtered out: " + strings.TrimSpace(lines[max(0, i-2)])
			}
		}
	}
	// One sort of the arms' pages, and one of the running items found.
	if n := strings.Count(plan, "Sort Key"); n > 2 {
		return fmt.Sprintf("%d sorts", n)
	}
	return ""
}
