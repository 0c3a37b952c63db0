package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

func TestHelpListsExitCodes(t *testing.T) {
	t.Parallel()
	r := mustRun(t, 0, "--help")
	wantContains(t, "help", r.stdout, "Exit codes:", "confirmation required", "runs", "items", "dlq", "stats", "serve", "migrate", "policy")
}

func TestMigrateSQLite(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + t.TempDir() + "/new.db"
	r := mustRun(t, 1, "migrate", "status", "--db", db)
	wantContains(t, "stderr", r.stderr, "does not exist", "migrate up")

	r = mustRun(t, 0, "migrate", "up", "--db", db)
	wantContains(t, "stdout", r.stdout, "up to date")

	r = mustRun(t, 0, "migrate", "status", "--db", db)
	wantContains(t, "stdout", r.stdout, "VERSION", "0001", "applied")
	if strings.Contains(r.stdout, "pending") {
		t.Errorf("pending migrations after migrate up:\n%s", r.stdout)
	}
	var ms []migrationRow
	decodeJSON(t, mustRun(t, 0, "migrate", "status", "--json", "--db", db), &ms)
	if len(ms) == 0 {
		t.Fatal("no migrations listed")
	}
	for _, m := range ms {
		if !m.Applied || m.AppliedAt.IsZero() {
			t.Errorf("migration %d not applied: %+v", m.Version, m)
		}
	}
}

func TestDatabaseFromEnvironment(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	r := runCLI(t, []string{envDatabaseURL + "=" + f.db}, "runs", "list")
	if r.code != 0 {
		t.Fatal(r)
	}
	wantContains(t, "runs list", r.stdout, "ocr", "webhook")
	// A plain *.db path works too.
	mustRun(t, 0, "runs", "list", "--db", strings.TrimPrefix(f.db, "sqlite:"))
	mustRun(t, 0, "runs", "list", "--db", "sqlite://"+strings.TrimPrefix(f.db, "sqlite:"))
}

func TestPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"runs", "list", "--db", "postgres://app:s3cretpw@127.0.0.1:1/app?connect_timeout=2"},
		{"runs", "list", "--db", "postgres://app@127.0.0.1:1/app?password=s3cretpw&connect_timeout=2"},
		{"runs", "list", "--db", "mysql://app:s3cretpw@127.0.0.1/app"},
	} {
		r := runCLI(t, nil, args...)
		if r.code == 0 {
			t.Errorf("%v: want failure, got %v", args, r)
		}
		if strings.Contains(r.stdout+r.stderr, "s3cretpw") {
			t.Errorf("%v: password printed:\n%v", args, r)
		}
	}
	r := runCLI(t, []string{envDatabaseURL + "=postgres://app:s3cretpw@127.0.0.1:1/app?connect_timeout=2"}, "stats")
	if r.code != 1 || strings.Contains(r.stdout+r.stderr, "s3cretpw") {
		t.Errorf("env URL: want exit 1 without the password, got %v", r)
	}
}

func TestRuns(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)

	r := mustRun(t, 0, f.args("runs", "list")...)
	wantContains(t, "runs list", r.stdout, "PIPELINE", "ocr", "nightly", "webhook", "partial_success", "25.0%")

	var runs []runJSON
	decodeJSON(t, mustRun(t, 0, f.args("runs", "list", "--json")...), &runs)
	if len(runs) != 2 || runs[0].ID != f.run2 || runs[1].ID != f.run1 {
		t.Fatalf("runs list --json: want runs %d, %d newest first, got %+v", f.run2, f.run1, runs)
	}
	for _, run := range runs {
		c := run.Counts
		if c.Total != c.Pending+c.Running+c.Succeeded+c.Dead+c.Canceled {
			t.Errorf("run %d counts do not add up: %+v", run.ID, c)
		}
	}
	if c := runs[1].Counts; c != (redrive.Counts{Total: 8, Pending: 1, Succeeded: 2, Dead: 4, Canceled: 1}) {
		t.Errorf("run1 counts: %+v", c)
	}

	decodeJSON(t, mustRun(t, 0, f.args("runs", "list", "--json", "--pipeline", "webhook")...), &runs)
	if len(runs) != 1 || runs[0].Pipeline != "webhook" {
		t.Errorf("--pipeline webhook: %+v", runs)
	}
	decodeJSON(t, mustRun(t, 0, f.args("runs", "list", "--json", "--status", "partial_success")...), &runs)
	if len(runs) != 1 || runs[0].ID != f.run2 {
		t.Errorf("--status partial_success: %+v", runs)
	}
	decodeJSON(t, mustRun(t, 0, f.args("runs", "list", "--json", "--limit", "1")...), &runs)
	if len(runs) != 1 {
		t.Errorf("--limit 1: %d runs", len(runs))
	}

	id := fmt.Sprint(f.run1)
	r = mustRun(t, 0, f.args("runs", "show", id)...)
	wantContains(t, "runs show", r.stdout,
		"Pipeline:", "ocr", "nightly", "running",
		"8 = 2 succeeded + 4 dead + 1 canceled + 1 pending + 0 running",
		"25.0% (2 of 8)", "failure budget 90.0%", "success threshold 95.0% (default)",
		"Retries needed", "Top errors:", "connection reset by peer", "HTTP 404: document not found")

	var d runDetail
	decodeJSON(t, mustRun(t, 0, f.args("runs", "show", id, "--json")...), &d)
	if d.Run.ID != f.run1 || d.Run.Counts.Total != 8 || d.Run.SuccessRate != 0.25 || d.Run.Options.FailureBudget != 0.9 {
		t.Errorf("runs show --json run: %+v", d.Run)
	}
	if len(d.RetryHistogram) == 0 || len(d.TopErrors) == 0 {
		t.Errorf("runs show --json: histogram %v, top errors %v", d.RetryHistogram, d.TopErrors)
	}
	finished := 0
	for _, b := range d.RetryHistogram {
		finished += b.Items
	}
	if finished == 0 {
		t.Errorf("histogram counts no finished items: %v", d.RetryHistogram)
	}

	r = mustRun(t, 3, f.args("runs", "show", "999")...)
	wantContains(t, "stderr", r.stderr, "run 999 does not exist")
	if strings.Contains(r.stderr, "sqlite") || strings.Contains(r.stderr, "redrive: not found") {
		t.Errorf("runs show of a missing run names the store's internals: %s", r.stderr)
	}
	r = mustRun(t, 2, f.args("runs", "show", "abc")...)
	wantContains(t, "stderr", r.stderr, "run ID", "abc")
	r = mustRun(t, 2, f.args("runs", "list", "--status", "done")...)
	wantContains(t, "stderr", r.stderr, "--status", "done", "partial_success")
	r = mustRun(t, 2, f.args("runs", "list", "--limit", "0")...)
	wantContains(t, "stderr", r.stderr, "--limit")
}

func TestItems(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)

	r := mustRun(t, 0, f.args("items", "list")...)
	wantContains(t, "items list", r.stdout, "STATE", "succeeded", "dead", "pending", "canceled", "connection reset by peer")

	var items []redrive.Item
	decodeJSON(t, mustRun(t, 0, f.args("items", "list", "--json")...), &items)
	if len(items) != 10 {
		t.Errorf("items list --json: %d items, want 10", len(items))
	}
	decodeJSON(t, mustRun(t, 0, f.args("items", "list", "--json", "--state", "dead,canceled")...), &items)
	if got := keysOf(f, items); got != "c,d,e,g,w1,h" {
		t.Errorf("--state dead,canceled: %s", got)
	}
	decodeJSON(t, mustRun(t, 0, f.args("items", "list", "--json", "--state", "dead", "--run", fmt.Sprint(f.run1), "--stage", "extract")...), &items)
	if got := keysOf(f, items); got != "c" {
		t.Errorf("--run 1 --stage extract --state dead: %s", got)
	}
	decodeJSON(t, mustRun(t, 0, f.args("items", "list", "--json", "--limit", "3")...), &items)
	if len(items) != 3 {
		t.Errorf("--limit 3: %d items", len(items))
	}
	decodeJSON(t, mustRun(t, 0, f.args("items", "list", "--json", "--state", "succeeded", "--pipeline", "ocr")...), &items)
	if got := keysOf(f, items); got != "a,b" {
		t.Errorf("--state succeeded --pipeline ocr: %s", got)
	}

	// The attempt timeline of c: fetch ok, then extract retry, retry, dead.
	c := fmt.Sprint(f.ids["c"])
	r = mustRun(t, 0, f.args("items", "show", c)...)
	wantContains(t, "items show", r.stdout, "State:", "dead", "Reason:", "retryable at stage extract after 3 attempts",
		"Attempts (4):", "OUTCOME", "DELAY AFTER", "30s", "150ms", "connection reset by peer")
	lines := timelineLines(r.stdout)
	want := [][]string{
		{"1", "fetch", "1", "succeeded"},
		{"2", "extract", "1", "retry", "retryable"},
		{"3", "extract", "2", "retry", "retryable"},
		{"4", "extract", "3", "dead", "retryable"},
	}
	if len(lines) != len(want) {
		t.Fatalf("timeline: want %d rows, got %q", len(want), lines)
	}
	for i, w := range want {
		fields := strings.Fields(lines[i])
		for j, v := range w {
			if j >= len(fields) || fields[j] != v {
				t.Errorf("timeline row %d: want %v..., got %q", i, w, lines[i])
				break
			}
		}
	}
	// Each attempt shows the hash of the stage configuration that made it.
	for i, stage := range []string{"fetch", "extract", "extract", "extract"} {
		if i < len(lines) && !strings.Contains(lines[i], redrive.Stage{Name: stage}.ConfigHash()) {
			t.Errorf("timeline row %d does not show the %s stage's configuration hash: %q", i, stage, lines[i])
		}
	}
	var d itemDetail
	decodeJSON(t, mustRun(t, 0, f.args("items", "show", c, "--json")...), &d)
	if len(d.Attempts) > 1 && d.Attempts[1].ConfigHash != (redrive.Stage{Name: "extract"}).ConfigHash() {
		t.Errorf("items show --json: attempt 2 config_hash %q, want the extract stage's", d.Attempts[1].ConfigHash)
	}
	if d.Item.ID != f.ids["c"] || d.Item.Reason == nil || d.Item.Reason.Attempts != 3 || len(d.Attempts) != 4 {
		t.Fatalf("items show --json: %+v", d)
	}
	if a := d.Attempts[1]; a.Outcome != redrive.OutcomeRetry || a.Delay != 30*time.Second || a.FinishedAt.Sub(a.StartedAt) != 150*time.Millisecond {
		t.Errorf("attempt 2: %+v", a)
	}
	// A pending item shows when it is due; an item with no attempts says so.
	r = mustRun(t, 0, f.args("items", "show", fmt.Sprint(f.ids["f"]))...)
	wantContains(t, "items show f", r.stdout, "pending", "Next attempt:", "(none yet)")

	r = mustRun(t, 3, f.args("items", "show", "999")...)
	wantContains(t, "stderr", r.stderr, "item 999")
	r = mustRun(t, 2, f.args("items", "show")...)
	wantContains(t, "stderr", r.stderr, "item ID")
	r = mustRun(t, 2, f.args("items", "list", "--state", "zombie")...)
	wantContains(t, "stderr", r.stderr, "--state", "zombie", "pending, running, succeeded, dead, canceled")
}

// timelineLines returns the rows of the attempt table of `items show`.
func timelineLines(out string) []string {
	_, table, ok := strings.Cut(out, "DELAY AFTER")
	if !ok {
		return nil
	}
	var rows []string
	for _, l := range strings.Split(table, "\n")[1:] {
		if strings.TrimSpace(l) != "" {
			rows = append(rows, l)
		}
	}
	return rows
}

// keysOf returns the keys of items, sorted by ID, comma-separated.
func keysOf(f *fixture, items []redrive.Item) string {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
		if keys[i] == "" {
			for k, id := range f.ids {
				if id == it.ID {
					keys[i] = k
				}
			}
		}
	}
	return strings.Join(keys, ",")
}

func TestStats(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	r := mustRun(t, 0, f.args("stats")...)
	wantContains(t, "stats", r.stdout, "PIPELINE", "STAGE", "fetch", "extract", "deliver", "TOTAL", "Retries needed", "Top errors:", "HTTP 410: gone")

	var s statsJSON
	decodeJSON(t, mustRun(t, 0, f.args("stats", "--json")...), &s)
	if s.Totals != (redrive.Counts{Total: 10, Pending: 1, Succeeded: 3, Dead: 5, Canceled: 1}) {
		t.Errorf("totals: %+v", s.Totals)
	}
	sum := 0
	for _, st := range s.Stages {
		sum += st.Total
	}
	if sum != s.Totals.Total {
		t.Errorf("stage counts add up to %d, totals say %d", sum, s.Totals.Total)
	}
	decodeJSON(t, mustRun(t, 0, f.args("stats", "--json", "--run", fmt.Sprint(f.run2))...), &s)
	if s.Totals.Total != 2 || s.Totals.Dead != 1 || len(s.Stages) != 1 || s.Stages[0].Stage != "deliver" {
		t.Errorf("stats --run 2: %+v", s)
	}
	decodeJSON(t, mustRun(t, 0, f.args("stats", "--json", "--pipeline", "ocr")...), &s)
	if s.Totals.Total != 8 {
		t.Errorf("stats --pipeline ocr: %+v", s.Totals)
	}
	for _, e := range s.TopErrors {
		if e.Pipeline != "ocr" {
			t.Errorf("stats --pipeline ocr: error of %s", e.Pipeline)
		}
	}
	mustRun(t, 3, f.args("stats", "--run", "999")...)
	r = mustRun(t, 2, f.args("stats", "--run", "x")...)
	wantContains(t, "stderr", r.stderr, "--run")
}

func TestBadUsage(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	cases := []struct {
		args []string
		msg  []string
	}{
		{[]string{"dlq", "list", "--since", "yesterday-ish"}, []string{"--since", "RFC 3339", "24h"}},
		{[]string{"dlq", "redrive", "--yes", "--since", "garbage"}, []string{"--since"}},
		{[]string{"dlq", "purge", "--yes", "--until", "-5h"}, []string{"--until"}},
		{[]string{"dlq", "redrive", "--yes", "--since", "1h", "--until", "3h"}, []string{"--until", "before --since"}},
		{[]string{"dlq", "purge", "--yes", "--limit", "-1"}, []string{"--limit", "-1", "0 or more"}},
		{[]string{"dlq", "redrive", "--yes", "--state", "succeeded"}, []string{"--state", "succeeded", "dead, canceled"}},
		{[]string{"dlq", "redrive", "--yes", "--rate", "-2"}, []string{"--rate"}},
		{[]string{"dlq", "redrive", "--yes", "--run", "-3"}, []string{"--run"}},
		{[]string{"dlq", "purge", "--yes", "--run", "seven"}, []string{"--run", "seven"}},
		{[]string{"dlq", "purge", "--force"}, []string{"unknown flag", "--force"}},
		{[]string{"dlq", "requeue"}, []string{"unknown command", "requeue"}},
		{[]string{"frobnicate"}, []string{"unknown command", "frobnicate"}},
		{[]string{"items", "list", "extra"}, []string{"no arguments"}},
		{[]string{"runs", "show", "0"}, []string{"run ID"}},
		{[]string{"dlq", "export", "--out", ""}, []string{"--out"}},
	}
	for _, c := range cases {
		r := runCLI(t, nil, f.args(c.args...)...)
		if r.code != 2 {
			t.Errorf("%v: want exit 2, got %v", c.args, r)
			continue
		}
		wantContains(t, fmt.Sprintf("%v stderr", c.args), r.stderr, c.msg...)
	}
	r := mustRun(t, 2, "runs", "list", "--db", "ftp://example.com/x")
	wantContains(t, "stderr", r.stderr, "--db", "sqlite:PATH")

	// Nothing changed.
	if n := countItems(t, f, redrive.StateDead); n != 5 {
		t.Errorf("dead items after bad commands: %d, want 5", n)
	}
	if n := countItems(t, f, redrive.StateCanceled); n != 1 {
		t.Errorf("canceled items after bad commands: %d, want 1", n)
	}
}
