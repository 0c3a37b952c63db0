package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// TestPostgres runs a subset of the commands against PostgreSQL, in a
// schema of its own. It skips when no server is reachable, except in CI.
func TestPostgres(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.NewSchema(t)
	f := &fixture{db: url, extra: []string{"--pg-schema", schema}}

	// An unmigrated schema: migrate status lists pending migrations, other
	// commands say to migrate first.
	r := mustRun(t, 0, f.args("migrate", "status")...)
	wantContains(t, "migrate status", r.stdout, "pending", "migrate up")
	r = mustRun(t, 1, f.args("runs", "list")...)
	wantContains(t, "stderr", r.stderr, "redrive migrate up", schema)

	r = mustRun(t, 0, f.args("migrate", "up")...)
	wantContains(t, "migrate up", r.stdout, "up to date", "applied")
	var ms []migrationRow
	decodeJSON(t, mustRun(t, 0, f.args("migrate", "status", "--json")...), &ms)
	for _, m := range ms {
		if !m.Applied {
			t.Errorf("after migrate up: %+v", m)
		}
	}
	mustRun(t, 0, f.args("migrate", "up")...) // idempotent

	s, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	seeded := seed(t, s)
	s.Close()
	seeded.db, seeded.extra = f.db, f.extra
	f = seeded

	var runs []runJSON
	decodeJSON(t, mustRun(t, 0, f.args("runs", "list", "--json")...), &runs)
	if len(runs) != 2 || runs[1].Counts != (redrive.Counts{Total: 8, Pending: 1, Succeeded: 2, Dead: 4, Canceled: 1}) {
		t.Fatalf("runs list: %+v", runs)
	}
	r = mustRun(t, 0, f.args("items", "show", fmt.Sprint(f.ids["c"]))...)
	wantContains(t, "items show", r.stdout, "Attempts (4):", "connection reset by peer", "30s")
	mustRun(t, 3, f.args("runs", "show", "424242")...)

	var items []redrive.Item
	decodeJSON(t, mustRun(t, 0, f.args("dlq", "list", "--json", "--class", "final")...), &items)
	if got := keysOf(f, items); got != "d,e,w1" {
		t.Errorf("dlq list --class final: %s", got)
	}
	r = mustRun(t, 0, f.args("dlq", "export", "--run", fmt.Sprint(f.run1))...)
	if n := len(readExport(t, r.stdout)); n != 4 {
		t.Errorf("export --run 1: %d lines", n)
	}
	r = mustRun(t, 0, f.args("dlq", "redrive", "--class", "final", "--dry-run")...)
	wantContains(t, "dry run", r.stdout, "3 items would be redriven")
	mustRun(t, 4, f.args("dlq", "redrive", "--class", "final")...)
	if n := countItems(t, f, redrive.StateDead); n != 5 {
		t.Fatalf("dead after dry run and unconfirmed redrive: %d", n)
	}
	r = mustRun(t, 0, f.args("dlq", "redrive", "--class", "final", "--yes")...)
	wantContains(t, "redrive", r.stdout, "redriven 3 items")
	if n := countItems(t, f, redrive.StatePending); n != 4 {
		t.Errorf("pending after redrive: %d, want 4", n)
	}
	mustRun(t, 4, f.args("dlq", "purge")...)
	r = mustRun(t, 0, f.args("dlq", "purge", "--yes")...)
	wantContains(t, "purge", r.stdout, "purged 2 items")
	var st statsJSON
	decodeJSON(t, mustRun(t, 0, f.args("stats", "--json")...), &st)
	// The purged items stay in the totals, as purged.
	if st.Totals.Total != 10 || st.Totals.Dead != 0 || st.Totals.Purged != 2 || !st.Totals.AddsUp() {
		t.Errorf("stats after purge: %+v", st.Totals)
	}
}
