package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// A page of the dead-letter queue filtered by pipeline, stage, class or
// fingerprint walks items_cause once per error group and reads no more
// than a page from each, with or without statistics. Left to the planner
// without statistics, such a page read every dead item of the filter
// through items_cause or items_dlq and sorted them: at a million dead
// items, 0.4 – 1.1 s a page for a filter holding a third of them. Their
// counts come from failure_counts and are the items' own.
func TestDLQPageWalksErrorGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.NewSchema(t)
	s := pgtest.OpenStoreAt(t, url, schema)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	items := pgx.Identifier{schema, "items"}.Sanitize()

	// Pipeline p: 2,400 deaths in four groups (two classes, two errors),
	// 300 canceled, 300 succeeded; pipeline q: 600 deaths of one class.
	kill := func(pipeline string, n int, state redrive.State, class func(i int) (string, string)) int64 {
		t.Helper()
		run := mustRun(t, s, pipeline)
		in := make([]redrive.NewItem, n)
		for i := range in {
			in[i].Payload = []byte(`{}`)
		}
		enqueue(t, s, run, in...)
		ls := claim(t, s, pipeline, n, t0)
		cs := make([]redrive.Completion, len(ls))
		for i, l := range ls {
			cs[i] = done(l, state, t0)
			if state != redrive.StateSucceeded {
				cs[i].Record.Class, cs[i].Record.Error = class(i)
				cs[i].Reason = &redrive.Reason{Stage: "a", Class: cs[i].Record.Class, Error: cs[i].Record.Error, Attempts: 1, At: t0}
			}
		}
		if _, err := s.Complete(ctx, cs); err != nil {
			t.Fatal(err)
		}
		return run.ID
	}
	kill("p", 2400, redrive.StateDead, func(i int) (string, string) {
		return []string{"timeout", "http"}[i%2], fmt.Sprintf("%s %d", []string{"read tcp: i/o timeout after", "503 from upstream, request"}[i/2%2], i)
	})
	kill("p", 300, redrive.StateCanceled, func(int) (string, string) { return "canceled", "canceled by an operator" })
	kill("p", 300, redrive.StateSucceeded, nil)
	runQ := kill("q", 600, redrive.StateDead, func(i int) (string, string) { return "timeout", "read tcp: i/o timeout after " + strconv.Itoa(i) })
	// A class kept as NULL (as rows written before classes were) is the
	// group '' in failure_counts, walked as NULL too.
	if _, err := conn.Exec(ctx, `UPDATE `+items+` SET reason_class = NULL
		WHERE id IN (SELECT id FROM `+items+` WHERE pipeline = 'p' AND state = 'dead' ORDER BY id DESC LIMIT 7)`); err != nil {
		t.Fatal(err)
	}

	dead := []redrive.State{redrive.StateDead}
	filters := []redrive.ItemFilter{
		{States: dead, Pipeline: "p"},
		{States: dead, Pipeline: "p", Stage: "a"},
		{States: dead, Class: "timeout"},
		{States: []redrive.State{redrive.StateDead, redrive.StateCanceled}, Pipeline: "p"},
		{States: []redrive.State{redrive.StateCanceled}, Pipeline: "p", Stage: "a"},
		{States: dead, Pipeline: "p", ErrorContains: "503"},
		{States: dead, Pipeline: "p", Class: "nothing of the kind"},
		{States: dead, Fingerprint: redrive.Fingerprint("read tcp: i/o timeout after 1")},
		{States: dead, RunID: runQ, Class: "timeout"},
	}
	// want lists the IDs f selects, read by conditions of its own.
	want := func(f redrive.ItemFilter) []int64 {
		t.Helper()
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		rows, err := conn.Query(ctx, `SELECT id FROM `+items+` WHERE state = ANY($1)
			AND ($2 = '' OR pipeline = $2) AND ($3 = '' OR stage = $3) AND ($4 = '' OR reason_class = $4)
			AND ($5 = '' OR reason_error LIKE '%' || $5 || '%') AND ($6 = '' OR reason_fingerprint = $6)
			AND ($7 = 0 OR run_id = $7) ORDER BY id`,
			states, f.Pipeline, f.Stage, f.Class, f.ErrorContains, f.Fingerprint, f.RunID)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	scanRows := regexp.MustCompile(`Scan.*actual time=\S+ rows=(\d+)`)
	check := func(when string) {
		t.Helper()
		for _, f := range filters {
			// Every page, through the cursor, in ID order.
			var got []int64
			page := f
			page.Limit = 101
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
			w := want(f)
			if !slices.Equal(got, w) {
				t.Errorf("%s, filter %+v: %d items listed, want %d (first %v, want %v)", when, f, len(got), len(w), got[:min(3, len(got))], w[:min(3, len(w))])
			}
			for _, limit := range []int{0, 5} {
				c := f
				c.Limit = limit
				n, err := s.Count(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				wn := len(w)
				if limit > 0 {
					wn = min(wn, limit)
				}
				if n != wn {
					t.Errorf("%s, filter %+v: counted %d items, want %d", when, c, n, wn)
				}
			}
			for _, generic := range []bool{false, true} {
				page := f
				page.Limit = 101
				plan, err := postgres.ListItemsPlan(ctx, s, page, generic)
				if err != nil {
					t.Fatal(err)
				}
				// No scan reads more than a page: each group's walk stops
				// after it. Without the walks one scan read all of them.
				for _, m := range scanRows.FindAllStringSubmatch(plan, -1) {
					if n, _ := strconv.Atoi(m[1]); n > page.Limit {
						t.Errorf("%s, filter %+v (generic %v): a scan read %d rows, more than a page:\n%s", when, f, generic, n, plan)
						break
					}
				}
			}
		}
	}
	check("without statistics")
	if _, err := conn.Exec(ctx, `ANALYZE `+items); err != nil {
		t.Fatal(err)
	}
	check("with statistics")
}
