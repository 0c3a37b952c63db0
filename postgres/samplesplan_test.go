package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// The read of an error group's newest dead items walks items_cause
// backwards from the group's newest item whatever the planner knows: in a
// generic plan, which cannot prove items_cause's state predicate from an
// argument, and without statistics, with which, right after a surge of
// deaths, it filtered the pipeline's whole class through items_dlq and
// sorted it (650 ms per group at 1,000,000 dead items).
func TestErrorSamplesPlanIgnoresStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.OpenStore(t)
	run := mustRun(t, s, "ex")
	// 4,000 items dead at once with four causes, no statistics taken.
	in := make([]redrive.NewItem, 4000)
	for i := range in {
		in[i] = redrive.NewItem{Payload: []byte(`{}`), Invalid: fmt.Sprintf("cause %d: bad input", i%4)}
	}
	enqueue(t, s, run, in...)
	groups, err := s.FailureGroups(ctx, redrive.ItemFilter{Pipeline: "ex"})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Dead != 4000 || len(groups[0].Examples) == 0 {
		t.Fatalf("groups = %+v; want one group of 4,000 dead items with examples", groups)
	}
	plan, err := postgres.SamplesPlan(ctx, s, groups[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "Index Scan Backward using items_cause") || strings.Contains(plan, "Sort") {
		t.Errorf("examples plan:\n%s\nwant a backward walk of items_cause", plan)
	}
}
