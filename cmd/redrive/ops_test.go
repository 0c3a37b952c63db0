package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// TestDLQFiltersValidated: a filter naming a class, stage or run that does
// not exist is an error, not "no items match".
func TestDLQFiltersValidated(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"dlq", "list", "--class", "fnal"}, exitUsage, `invalid --class: unknown class "fnal"`},
		{[]string{"dlq", "redrive", "--stage", "llm-call", "--yes"}, exitUsage, `invalid --stage: unknown stage "llm-call"`},
		{[]string{"dlq", "purge", "--run", "42", "--yes"}, exitNotFound, "invalid --run: run 42 does not exist"},
		{[]string{"dlq", "export", "--pipeline", "orc"}, exitUsage, `invalid --pipeline: unknown pipeline "orc"`},
		{[]string{"items", "list", "--run", strconv.FormatInt(f.run2, 10), "--stage", "fetch"}, exitUsage, "invalid --stage"},
	} {
		r := runCLI(t, nil, f.args(tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("redrive %s: want exit %d with %q, got %v", strings.Join(tc.args, " "), tc.code, tc.want, r)
		}
	}
	// Error search ignores case.
	r := mustRun(t, 0, f.args("dlq", "list", "--error-contains", "CONNECTION RESET", "--json")...)
	var items []redrive.Item
	decodeJSON(t, r, &items)
	if len(items) != 1 || items[0].ID != f.ids["c"] {
		t.Errorf("--error-contains ignoring case: %v", r)
	}
}

// TestDLQListSaysWhenTruncated: a listing cut at --limit says so and how
// to see the rest.
func TestDLQListSaysWhenTruncated(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	r := mustRun(t, 0, f.args("dlq", "list", "--limit", "2")...)
	last := f.ids["d"] // dead in ID order: c, d, e, g, w1
	wantContains(t, "dlq list --limit 2", r.stdout, "(showing the first 2; 3 more match: --after-id "+strconv.FormatInt(last, 10))
	r = mustRun(t, 0, f.args("dlq", "list", "--limit", "2", "--after-id", strconv.FormatInt(last, 10), "--json")...)
	var items []redrive.Item
	decodeJSON(t, r, &items)
	if len(items) != 2 || items[0].ID != f.ids["e"] || !strings.Contains(r.stderr, "1 more match") {
		t.Errorf("next page: %v", r)
	}
	if r := mustRun(t, 0, f.args("dlq", "list")...); strings.Contains(r.stdout, "more match") {
		t.Errorf("a complete listing says more match:\n%s", r.stdout)
	}
}

// TestDLQRedriveWarnsWithoutWorker: a redrive that no live worker will
// work says so.
func TestDLQRedriveWarnsWithoutWorker(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	r := mustRun(t, 0, f.args("dlq", "redrive", "--run", strconv.FormatInt(f.run2, 10), "--yes")...)
	wantContains(t, "redrive with no worker", r.stdout, "redriven 1 item", "warning: no live worker serves pipeline webhook")
	s := openFixture(t, f)
	now := time.Now()
	err := s.UpsertWorker(context.Background(), redrive.Worker{Owner: "w1", Host: "h", PID: 1, Pipelines: []string{"ocr"},
		StartedAt: now, LastSeen: now, ExpiresAt: now.Add(time.Hour)})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, 0, f.args("dlq", "redrive", "--run", strconv.FormatInt(f.run1, 10), "--class", "final", "--yes", "--json")...)
	var res changeResult
	decodeJSON(t, r, &res)
	if res.Count != 2 || res.Warning != "" {
		t.Errorf("redrive served by a live worker: %+v", res)
	}
	r = mustRun(t, 0, f.args("workers")...)
	wantContains(t, "workers", r.stdout, "w1", "ocr", "live")
}

// TestDLQRedriveFromStage: --from-stage restarts items at an earlier stage
// with the input it had; items that never reached it are refused.
func TestDLQRedriveFromStage(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	run := strconv.FormatInt(f.run1, 10)
	r := runCLI(t, nil, f.args("dlq", "redrive", "--run", run, "--from-stage", "extract", "--yes")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, `invalid --from-stage`) || !strings.Contains(r.stderr, `never reached stage "extract"`) {
		t.Fatalf("from a stage d and e never reached: %v", r)
	}
	mustRun(t, 0, f.args("dlq", "redrive", "--run", run, "--stage", "extract", "--from-stage", "fetch", "--yes")...)
	s := openFixture(t, f)
	defer s.Close()
	it, err := s.GetItem(context.Background(), f.ids["c"])
	if err != nil {
		t.Fatal(err)
	}
	if it.State != redrive.StatePending || it.Stage != "fetch" || it.StageIndex != 0 || string(it.Payload) != `{"doc":"c"}` {
		t.Errorf("c after --from-stage fetch: %+v", it)
	}
}

// TestItemsShowWording: attempts in the singular; no "(none yet)" for an
// item that will never run.
func TestItemsShowWording(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	r := mustRun(t, 0, f.args("items", "show", strconv.FormatInt(f.ids["d"], 10))...)
	wantContains(t, "items show d", r.stdout, "after 1 attempt,")
	r = mustRun(t, 0, f.args("items", "show", strconv.FormatInt(f.ids["g"], 10))...)
	if strings.Contains(r.stdout, "none yet") || !strings.Contains(r.stdout, "never ran") {
		t.Errorf("items show of an invalid input:\n%s", r.stdout)
	}
}

// TestRunFlagsAndHelp: run's flag errors name the flag; its help lists its
// own exit codes only.
func TestRunFlagsAndHelp(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	p := e.write("p.yaml", "name: p\nrun: {success_threshold: 0.8}\nstages:\n  - name: a\n    exec: {command: cat}\n")
	in := e.write("in.jsonl", "{\"id\": 1}\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "-3"}, "invalid --workers: -3 is negative"},
		{[]string{"--failure-budget", "1.5"}, "invalid --failure-budget"},
		{[]string{"--partial-threshold", "0.9"}, "invalid --partial-threshold: the partial threshold 0.9 (--partial-threshold) exceeds the success threshold 0.8 (run.success_threshold in"},
		{[]string{"--lease", "0s"}, "invalid --lease"},
	} {
		r := e.run(append([]string{p, "--input", in}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "RunOptions") {
			t.Errorf("run %v: want exit 2 with %q, got %v", tc.args, tc.want, r)
		}
	}
	r := mustRun(t, 0, "run", "--help")
	if strings.Contains(r.stdout, "confirmation required") || strings.Count(r.stdout, "Exit status") != 1 || !strings.Contains(r.stdout, "6    the run was canceled by an operator") {
		t.Errorf("run --help:\n%s", r.stdout)
	}
}

// TestNoSurpriseDatabases: serve does not create a SQLite file for a typo,
// and bench never writes into REDRIVE_DATABASE_URL's database.
func TestNoSurpriseDatabases(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.db")
	r := runCLI(t, nil, "serve", "--db", "sqlite:"+typo, "--addr", "127.0.0.1:0")
	if r.code == 0 || !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("serve of a missing file: %v", r)
	}
	if _, err := os.Stat(typo); err == nil {
		t.Errorf("serve created %s", typo)
	}
	user := filepath.Join(dir, "user.db")
	r = runCLI(t, []string{"REDRIVE_DATABASE_URL=sqlite:" + user}, "bench", "--items", "20", "--stages", "1", "--workers", "2")
	if r.code != 0 {
		t.Fatalf("bench: %v", r)
	}
	if _, err := os.Stat(user); err == nil {
		t.Errorf("bench wrote into REDRIVE_DATABASE_URL's database %s", user)
	}
}
