package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// internals matches what the command's errors should not say: the store's
// error chains and doubled package prefixes.
var internals = regexp.MustCompile(`sqlite: |postgres: |runner: |bad usage|redrive: redrive|redrive: not found|RunOptions`)

// TestErrorsSayWhatTheUserGave checks that the command's errors say what is
// wrong with what the user gave (the run, the item, the run name), not the
// chain of packages the error came through: they used to read
// "run 999: sqlite: get run 999: redrive: not found" and
// "runner: bad usage: redrive: the named run was made from other input".
func TestErrorsSayWhatTheUserGave(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	dir := t.TempDir()
	yaml := filepath.Join(dir, "echo.yaml")
	if err := os.WriteFile(yaml, []byte("name: echo\nstages:\n  - name: shout\n    exec:\n      command: cat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in1, in2 := filepath.Join(dir, "one.jsonl"), filepath.Join(dir, "two.jsonl")
	for p, body := range map[string]string{in1: "{\"id\":\"a\"}\n", in2: "{\"id\":\"b\"}\n"} {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(t, 0, f.args("run", yaml, "--input", in1, "--run-name", "mine")...)

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"runs", "show", "999"}, 3, "run 999 does not exist"},
		{[]string{"items", "show", "999"}, 3, "item 999 does not exist"},
		{[]string{"dlq", "show", "999"}, 3, "item 999 does not exist"},
		{[]string{"stats", "--run", "999"}, 3, "invalid --run: run 999 does not exist"},
		{[]string{"run", yaml, "--input", in2, "--run-name", "mine"}, 2, "the named run was made from other input"},
		{[]string{"run", yaml, "--input", in1, "--failure-budget", "2"}, 2, "invalid --failure-budget"},
	} {
		r := mustRun(t, tc.code, f.args(tc.args...)...)
		wantContains(t, tc.args[0]+" "+tc.args[1], r.stderr, "redrive: "+tc.says)
		if m := internals.FindString(r.stderr); m != "" {
			t.Errorf("redrive %v says %q: %s", tc.args, m, r.stderr)
		}
	}
}
