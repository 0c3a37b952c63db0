package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// A page of dead items filtered by a pipeline and stage that hold most of
// the table reads the table in ID order and stops after the page; a rare
// filter's page goes through the dead-letter indexes. Every page lists
// what the filter selects, in ID order, with statistics and without.
func TestDLQPageReadsInIDOrderWhenCommon(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "redrive.db"))
	now := time.Now()
	enqueue := func(pipeline, stage string, n int, invalid func(i int) string) {
		t.Helper()
		run, _, err := s.CreateRun(ctx, pipeline, redrive.RunOptions{}, now)
		if err != nil {
			t.Fatal(err)
		}
		in := make([]redrive.NewItem, n)
		for i := range in {
			in[i].Payload = []byte(`{}`)
			if invalid != nil {
				in[i].Invalid = invalid(i)
			}
		}
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: pipeline, Stage: stage, Items: in, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	bad := func(i int) string { return fmt.Sprintf("line %d: field %c missing", i, 'a'+i%3) }
	// Pipeline p: 3,000 dead at stage a, in three causes, between 1,000
	// pending; pipeline q: 20 dead.
	enqueue("p", "a", 500, nil)
	enqueue("p", "a", 3000, bad)
	enqueue("q", "a", 20, bad)
	enqueue("p", "a", 500, nil)

	dead := []redrive.State{redrive.StateDead}
	common := []redrive.ItemFilter{
		{States: dead, Pipeline: "p", Stage: "a"},
		{States: dead, Class: redrive.ClassInvalidInput},
		{States: []redrive.State{redrive.StateDead, redrive.StateCanceled}, Pipeline: "p"},
		{States: dead, Fingerprint: redrive.Fingerprint(bad(1))},
	}
	rare := []redrive.ItemFilter{
		{States: dead, Pipeline: "q"},
		{States: dead, Pipeline: "q", Stage: "a", Fingerprint: redrive.Fingerprint(bad(2))},
	}
	want := func(f redrive.ItemFilter) []int64 {
		t.Helper()
		states := make([]string, len(f.States))
		for i := range states {
			states[i] = fmt.Sprintf("?%d", 5+i)
		}
		rows, err := s.r.QueryContext(ctx, `SELECT id FROM items WHERE state IN ('dead', 'canceled') AND state IN (`+
			strings.Join(states, ", ")+`) AND (?1 = '' OR pipeline = ?1) AND (?2 = '' OR stage = ?2)
			AND (?3 = '' OR reason_class = ?3) AND (?4 = '' OR reason_fingerprint = ?4) ORDER BY id`,
			append([]any{f.Pipeline, f.Stage, f.Class, f.Fingerprint}, statesAny(f.States)...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	check := func(when string) {
		t.Helper()
		for _, f := range append(slices.Clone(common), rare...) {
			var got []int64
			page := f
			page.Limit = 50
			for {
				its, err := s.ListItems(ctx, page)
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range its {
					got = append(got, it.ID)
				}
				if len(its) < page.Limit {
					break
				}
				page.AfterID = its[len(its)-1].ID
			}
			if w := want(f); len(w) == 0 || !slices.Equal(got, w) {
				t.Errorf("%s, filter %+v: listed %d items, want %d", when, f, len(got), len(w))
			}
		}
		for i, f := range append(slices.Clone(common), rare...) {
			f.Limit = 50
			scan, err := s.scansIDs(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			q, args := listItemsSQL(f, scan)
			plan := queryPlan(t, s, q, args)
			isCommon := i < len(common)
			sorted := strings.Contains(plan, "TEMP B-TREE")
			if isCommon && (!scan || sorted || !strings.Contains(plan, "SCAN items")) {
				t.Errorf("%s, common filter %+v: plan %s; want a read in ID order without a sort", when, f, plan)
			}
			if !isCommon && (scan || !strings.Contains(plan, "USING")) {
				t.Errorf("%s, rare filter %+v: plan %s; want an index", when, f, plan)
			}
		}
	}
	check("without statistics")
	if _, err := s.w.ExecContext(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	check("with statistics")
}

func statesAny(ss []redrive.State) []any {
	out := make([]any, len(ss))
	for i, st := range ss {
		out[i] = string(st)
	}
	return out
}

// queryPlan is SQLite's EXPLAIN QUERY PLAN of q, its steps joined by "; ".
func queryPlan(t *testing.T, s *Store, q string, args []any) string {
	t.Helper()
	rows, err := s.r.Query(`EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, "; ")
}
