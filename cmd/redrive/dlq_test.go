package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

func TestDLQListShow(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)

	r := mustRun(t, 0, f.args("dlq", "list")...)
	wantContains(t, "dlq list", r.stdout, "CLASS", "ATTEMPTS", "extract", "retryable", "final", "invalid_input", "HTTP 410: gone", "line 7: not JSON")
	if strings.Contains(r.stdout, "canceled by operator") {
		t.Errorf("dlq list shows canceled items by default:\n%s", r.stdout)
	}

	list := func(args ...string) string {
		t.Helper()
		var items []redrive.Item
		decodeJSON(t, mustRun(t, 0, f.args(append([]string{"dlq", "list", "--json"}, args...)...)...), &items)
		for _, it := range items {
			if it.Reason == nil {
				t.Errorf("dlq list %v: item %d has no reason", args, it.ID)
			}
		}
		return keysOf(f, items)
	}
	cases := []struct {
		args []string
		want string
	}{
		{nil, "c,d,e,g,w1"},
		{[]string{"--run", fmt.Sprint(f.run1)}, "c,d,e,g"},
		{[]string{"--pipeline", "webhook"}, "w1"},
		{[]string{"--stage", "extract"}, "c"},
		{[]string{"--class", "final"}, "d,e,w1"},
		{[]string{"--class", "invalid_input"}, "g"},
		{[]string{"--error-contains", "reset by"}, "c"},
		{[]string{"--class", "final", "--error-contains", "HTTP 4"}, "d,e,w1"},
		{[]string{"--since", "24h"}, "c,d,e,g,w1"},
		{[]string{"--since", "1d"}, "c,d,e,g,w1"},
		{[]string{"--since", "1m"}, ""},
		{[]string{"--until", f.base.Add(-time.Hour).Format(time.RFC3339)}, ""},
		{[]string{"--since", f.base.Add(-time.Hour).Format(time.RFC3339), "--until", time.Now().Add(time.Hour).Format(time.RFC3339)}, "c,d,e,g,w1"},
		{[]string{"--limit", "2"}, "c,d"},
		{[]string{"--state", "canceled"}, "h"},
		{[]string{"--state", "dead,canceled", "--run", fmt.Sprint(f.run1)}, "c,d,e,g,h"},
	}
	for _, c := range cases {
		if got := list(c.args...); got != c.want {
			t.Errorf("dlq list %v: got %q, want %q", c.args, got, c.want)
		}
	}
	r = mustRun(t, 0, f.args("dlq", "list", "--since", "1m")...)
	wantContains(t, "empty dlq list", r.stdout, "(no items match)")

	c := fmt.Sprint(f.ids["c"])
	r = mustRun(t, 0, f.args("dlq", "show", c)...)
	wantContains(t, "dlq show", r.stdout, "Reason:", "retryable at stage extract after 3 attempts", "Error:", "connection reset by peer", "Attempts (4):")
	var d itemDetail
	decodeJSON(t, mustRun(t, 0, f.args("dlq", "show", c, "--json")...), &d)
	if d.Item.State != redrive.StateDead || len(d.Attempts) != 4 {
		t.Errorf("dlq show --json: %+v", d)
	}
	// A succeeded item is not in the dead-letter queue.
	r = mustRun(t, 3, f.args("dlq", "show", fmt.Sprint(f.ids["a"]))...)
	wantContains(t, "stderr", r.stderr, "not in the dead-letter queue", "succeeded")
	mustRun(t, 3, f.args("dlq", "show", "12345")...)
}

// readExport parses JSON lines of redrive.ExportRecord.
func readExport(t *testing.T, data string) []redrive.ExportRecord {
	t.Helper()
	var out []redrive.ExportRecord
	sc := bufio.NewScanner(strings.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec redrive.ExportRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		out = append(out, rec)
	}
	return out
}

func TestDLQExport(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)

	r := mustRun(t, 0, f.args("dlq", "export")...)
	recs := readExport(t, r.stdout)
	if len(recs) != 5 {
		t.Fatalf("export: %d lines, want 5:\n%s", len(recs), r.stdout)
	}
	wantContains(t, "stderr", r.stderr, "exported 5 items")
	byKey := map[string]redrive.ExportRecord{}
	for _, rec := range recs {
		if rec.Item.State != redrive.StateDead || rec.Item.Reason == nil || rec.Item.Reason.Class == "" || rec.Item.Reason.Error == "" {
			t.Errorf("export record without a reason: %+v", rec.Item)
		}
		byKey[rec.Item.Key] = rec
	}
	if c := byKey["c"]; len(c.Attempts) != 4 || c.Item.Reason.Stage != "extract" || c.Attempts[3].Outcome != redrive.OutcomeDead {
		t.Errorf("export of c: %+v", c)
	}
	if g := byKey["g"]; g.Item.Reason.Class != redrive.ClassInvalidInput || len(g.Attempts) != 0 {
		t.Errorf("export of g: %+v", g)
	}

	out := filepath.Join(t.TempDir(), "dead.jsonl")
	r = mustRun(t, 0, f.args("dlq", "export", "--run", fmt.Sprint(f.run1), "--class", "final", "--out", out)...)
	wantContains(t, "stderr", r.stderr, "exported 2 items to "+out)
	if r.stdout != "" {
		t.Errorf("export --out wrote to stdout: %q", r.stdout)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOfRecords(readExport(t, string(b))); got != "d,e" {
		t.Errorf("export --class final --run 1: %s", got)
	}
	entries, _ := os.ReadDir(filepath.Dir(out))
	if len(entries) != 1 {
		t.Errorf("export left files behind: %v", entries)
	}

	r = mustRun(t, 0, f.args("dlq", "export", "--state", "canceled")...)
	if got := keysOfRecords(readExport(t, r.stdout)); got != "h" {
		t.Errorf("export --state canceled: %s", got)
	}
	r = mustRun(t, 0, f.args("dlq", "export", "--limit", "1")...)
	if got := keysOfRecords(readExport(t, r.stdout)); got != "c" {
		t.Errorf("export --limit 1: %s", got)
	}
	// Export changes nothing.
	if n := countItems(t, f, redrive.StateDead); n != 5 {
		t.Errorf("dead after export: %d", n)
	}
}

func keysOfRecords(recs []redrive.ExportRecord) string {
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = r.Item.Key
	}
	return strings.Join(keys, ",")
}

// itemStates returns the states of the fixture's items by key.
func itemStates(t *testing.T, f *fixture) map[string]redrive.State {
	t.Helper()
	s := openFixture(t, f)
	defer s.Close()
	out := map[string]redrive.State{}
	for k, id := range f.ids {
		it, err := s.GetItem(context.Background(), id)
		if err != nil {
			out[k] = "gone"
			continue
		}
		out[k] = it.State
	}
	return out
}

func sameStates(t *testing.T, what string, got, want map[string]redrive.State) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: item %s is %s, want %s", what, k, got[k], w)
		}
	}
}

func TestDLQRedrive(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	before := itemStates(t, f)
	run1 := fmt.Sprint(f.run1)

	r := mustRun(t, 0, f.args("dlq", "redrive", "--run", run1, "--dry-run")...)
	wantContains(t, "dry run", r.stdout, "dry run: 4 items would be redriven", "run "+run1)
	var res changeResult
	decodeJSON(t, mustRun(t, 0, f.args("dlq", "redrive", "--run", run1, "--dry-run", "--json")...), &res)
	if res != (changeResult{Action: "redrive", DryRun: true, Count: 4}) {
		t.Errorf("dry run --json: %+v", res)
	}
	sameStates(t, "after dry run", itemStates(t, f), before)

	// Not a terminal and no --yes: exit 4, nothing changes.
	r = mustRun(t, 4, f.args("dlq", "redrive", "--run", run1)...)
	wantContains(t, "stderr", r.stderr, "confirmation required", "4 items", "--yes")
	sameStates(t, "after unconfirmed redrive", itemStates(t, f), before)

	// No match: nothing to do, exit 0.
	r = mustRun(t, 0, f.args("dlq", "redrive", "--error-contains", "no such error")...)
	wantContains(t, "no match", r.stdout, "no items match")

	r = mustRun(t, 0, f.args("dlq", "redrive", "--run", run1, "--class", "final", "--rate", "10", "--yes")...)
	wantContains(t, "redrive", r.stdout, "redriven 2 items")
	after := itemStates(t, f)
	want := map[string]redrive.State{"d": redrive.StatePending, "e": redrive.StatePending, "c": redrive.StateDead, "g": redrive.StateDead, "w1": redrive.StateDead, "h": redrive.StateCanceled, "a": redrive.StateSucceeded}
	sameStates(t, "after redrive --class final", after, want)

	// The redriven items restart at the stage that failed with a fresh
	// attempt counter, spread by --rate, history kept.
	s := openFixture(t, f)
	d, err := s.GetItem(context.Background(), f.ids["d"])
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.GetItem(context.Background(), f.ids["e"])
	if err != nil {
		t.Fatal(err)
	}
	atts, err := s.Attempts(context.Background(), f.ids["d"])
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	if d.Stage != "fetch" || d.Attempt != 0 || len(atts) != 1 {
		t.Errorf("redriven d: stage %s attempt %d, %d attempts kept", d.Stage, d.Attempt, len(atts))
	}
	if gap := e.NextAt.Sub(d.NextAt); gap < 50*time.Millisecond || gap > 200*time.Millisecond {
		t.Errorf("--rate 10: items due %v apart, want ~100ms", gap)
	}

	// Canceled items need --state canceled.
	r = mustRun(t, 0, f.args("dlq", "redrive", "--state", "canceled", "--yes", "--json")...)
	decodeJSON(t, r, &res)
	if res.Count != 1 || res.DryRun {
		t.Errorf("redrive --state canceled: %+v", res)
	}
	if st := itemStates(t, f)["h"]; st != redrive.StatePending {
		t.Errorf("h after redrive --state canceled: %s", st)
	}
}

func TestDLQPurge(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	before := itemStates(t, f)

	r := mustRun(t, 0, f.args("dlq", "purge", "--class", "final", "--dry-run")...)
	wantContains(t, "dry run", r.stdout, "dry run: 3 items would be purged", "class final")
	sameStates(t, "after dry run", itemStates(t, f), before)

	r = mustRun(t, 4, f.args("dlq", "purge", "--class", "final")...)
	wantContains(t, "stderr", r.stderr, "confirmation required", "3 items would be purged", "--yes")
	sameStates(t, "after unconfirmed purge", itemStates(t, f), before)

	r = mustRun(t, 0, f.args("dlq", "purge", "--class", "final", "--pipeline", "ocr", "-y")...)
	wantContains(t, "purge", r.stdout, "purged 2 items")
	after := itemStates(t, f)
	sameStates(t, "after purge", after, map[string]redrive.State{"d": "gone", "e": "gone", "w1": redrive.StateDead, "c": redrive.StateDead, "h": redrive.StateCanceled})
	mustRun(t, 3, f.args("items", "show", fmt.Sprint(f.ids["d"]))...)

	// Purge leaves canceled items alone unless asked.
	mustRun(t, 0, f.args("dlq", "purge", "--yes")...)
	sameStates(t, "after purge all", itemStates(t, f), map[string]redrive.State{"c": "gone", "g": "gone", "w1": "gone", "h": redrive.StateCanceled, "a": redrive.StateSucceeded, "f": redrive.StatePending})
	mustRun(t, 0, f.args("dlq", "purge", "--state", "canceled", "--yes")...)
	if st := itemStates(t, f)["h"]; st != "gone" {
		t.Errorf("h after purge --state canceled: %s", st)
	}
	var runs []runJSON
	decodeJSON(t, mustRun(t, 0, f.args("runs", "list", "--json")...), &runs)
	for _, run := range runs {
		c := run.Counts
		if !c.AddsUp() || c.Purged == 0 {
			t.Errorf("run %d counts after purge: %+v, want the purged items counted", run.ID, c)
		}
	}
}

// TestDLQConfirmOnTerminal answers the prompt on a pseudo-terminal, made by
// script(1) from util-linux; it skips where that is not installed.
func TestDLQConfirmOnTerminal(t *testing.T) {
	t.Parallel()
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) not installed: cannot make a terminal")
	}
	f := newSQLiteFixture(t)
	prompt := func(answer string, args ...string) result {
		t.Helper()
		line := binPath + " " + strings.Join(f.args(args...), " ")
		cmd := exec.Command(script, "-qec", line, "/dev/null")
		cmd.Env = cleanEnv()
		cmd.Stdin = strings.NewReader(answer + "\n")
		out, err := cmd.CombinedOutput()
		r := result{stdout: string(out)}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := prompt("n", "dlq", "purge", "--class", "final")
	if r.code != 4 {
		t.Fatalf("declined purge: %v", r)
	}
	wantContains(t, "declined purge", r.stdout, "3 items will be purged (dead items, class final). Continue? [y/N]", "not confirmed")
	if n := countItems(t, f, redrive.StateDead); n != 5 {
		t.Fatalf("declined purge changed state: %d dead", n)
	}
	r = prompt("y", "dlq", "redrive", "--class", "final", "--pipeline", "webhook")
	if r.code != 0 {
		t.Fatalf("confirmed redrive: %v", r)
	}
	wantContains(t, "confirmed redrive", r.stdout, "1 item will be redriven", "redriven 1 item")
	if st := itemStates(t, f)["w1"]; st != redrive.StatePending {
		t.Errorf("w1 after confirmed redrive: %s", st)
	}
}
