package main

import (
	"context"
	"fmt"
	"os/user"
	"slices"
	"strings"
	"testing"

	"github.com/redrive/redrive"
)

// auditLog reads the fixture's audit log, newest first.
func auditLog(t *testing.T, f *fixture) []redrive.AuditAction {
	t.Helper()
	s := openFixture(t, f)
	defer s.Close()
	acts, err := s.ListActions(context.Background(), redrive.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return acts
}

// TestCLIAudit: redrive, purge, pause and resume from the command line are
// recorded in the audit log under --actor, the OS user by default, with
// their filter, count and how; a redrive links exactly the items it
// changed; dry runs and refused confirmations record nothing; an actor the
// log cannot record is a usage error that changes nothing.
func TestCLIAudit(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	me := "unknown"
	if u, err := user.Current(); err == nil {
		me = u.Username
	}
	run1 := fmt.Sprint(f.run1)
	mustRun(t, 0, f.args("dlq", "redrive", "--run", run1, "--dry-run")...)
	mustRun(t, 4, f.args("dlq", "redrive", "--run", run1)...)
	if acts := auditLog(t, f); len(acts) != 0 {
		t.Fatalf("a dry run and an unconfirmed redrive recorded %+v", acts)
	}
	r := mustRun(t, 2, f.args("dlq", "redrive", "--run", run1, "--yes", "--actor", "eve\nforged line")...)
	wantContains(t, "bad actor", r.stderr, "--actor")
	if n := countItems(t, f, redrive.StateDead); n != 5 {
		t.Fatalf("a refused --actor changed items: %d dead, want 5", n)
	}

	mustRun(t, 0, f.args("dlq", "redrive", "--run", run1, "--class", "final", "--rate", "10", "--yes", "--actor", "alice@example.com")...)
	mustRun(t, 0, f.args("dlq", "purge", "--pipeline", "webhook", "--yes")...)
	mustRun(t, 0, f.args("stages", "pause", "--pipeline", "ocr", "--stage", "extract", "--reason", "OCR down", "--actor", "bob")...)
	mustRun(t, 0, f.args("stages", "resume", "--pipeline", "ocr", "--stage", "extract")...)

	acts := auditLog(t, f)
	type entry struct {
		actor, kind, filter string
		count               int
		detail              string
	}
	var got []entry
	for _, a := range acts {
		got = append(got, entry{a.Actor, a.Kind, a.Filter, a.Count, a.Detail})
	}
	want := []entry{
		{me, "resume", "pipeline=ocr&stage=extract", 0, ""},
		{"bob", "pause", "pipeline=ocr&stage=extract", 0, "OCR down"},
		{me, "purge", "pipeline=webhook&state=dead", 1, ""},
		{"alice@example.com", "redrive", "class=final&run=" + run1 + "&state=dead", 2, "rate 10/s"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("audit log:\n got %+v\nwant %+v", got, want)
	}
	s := openFixture(t, f)
	defer s.Close()
	marked, err := s.ListItems(context.Background(), redrive.ItemFilter{ActionID: acts[3].ID})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, it := range marked {
		keys = append(keys, it.Key)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"d", "e"}) {
		t.Errorf("items marked by the redrive: %v, want d and e", keys)
	}
	ps, err := s.PausedStages(context.Background())
	if err != nil || len(ps) != 0 {
		t.Errorf("paused stages %+v, %v", ps, err)
	}
}

// TestCLIUnknownFilterValues: a filter value that names nothing is a usage
// error naming the flag (exit 2), on every command that filters, rather
// than an empty answer.
func TestCLIUnknownFilterValues(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	for _, args := range [][]string{
		{"dlq", "list", "--class", "fnal"},
		{"dlq", "list", "--stage", "nope"},
		{"dlq", "list", "--state", "zombie"},
		{"dlq", "redrive", "--pipeline", "nope", "--dry-run"},
		{"items", "list", "--state", "zombie"},
		{"runs", "list", "--pipeline", "nope"},
		{"stats", "--pipeline", "nope"},
	} {
		r := mustRun(t, 2, f.args(args...)...)
		flag := "--" + strings.TrimPrefix(args[len(args)-2], "--")
		if args[len(args)-1] == "--dry-run" {
			flag = args[len(args)-3]
		}
		wantContains(t, strings.Join(args, " "), r.stderr, flag)
	}
}
