package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redrive/redrive"
)

// TestExecCommandInCurrentDirectory: "command: ./stage.sh" in a pipeline
// file of the current directory runs ./stage.sh; it was looked up in PATH
// as "stage.sh" and not found.
func TestExecCommandInCurrentDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("stage.sh", []byte("#!/bin/sh\necho '{\"ok\": true}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir("work", 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Parse("pipeline.yaml", []byte("stages:\n  - name: a\n    exec: {command: ./stage.sh, dir: work}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Pipeline()
	if err != nil {
		t.Fatalf("Pipeline: %v", err)
	}
	out, err := p.Stages[0].Handle(context.Background(), &redrive.Item{Payload: []byte(`{}`)})
	if err != nil || string(out) != `{"ok": true}` {
		t.Fatalf("handler = %s, %v", out, err)
	}
}

// TestConfigMistakesAtLoad: an undefined ${VAR} and a missing command are
// reported by Pipeline with the file and line, before any item runs.
func TestConfigMistakesAtLoad(t *testing.T) {
	t.Setenv("REDRIVE_TEST_SET", "")
	for _, tc := range []struct{ name, yaml, want string }{
		{"url", "stages:\n  - name: a\n    http:\n      url: \"${REDRIVE_TEST_UNSET_API}/x\"\n", "p.yaml:4:12: stage \"a\": url uses ${REDRIVE_TEST_UNSET_API}"},
		{"header", "stages:\n  - name: a\n    http:\n      url: http://127.0.0.1/x\n      headers: {Authorization: \"Bearer ${REDRIVE_TEST_UNSET_TOKEN}\"}\n", "p.yaml:5:16: stage \"a\": header Authorization uses ${REDRIVE_TEST_UNSET_TOKEN}"},
		{"body", "stages:\n  - name: a\n    http:\n      url: http://127.0.0.1/x\n      body: '{\"key\": \"${REDRIVE_TEST_UNSET_KEY}\"}'\n", "p.yaml:5:13: stage \"a\": body uses ${REDRIVE_TEST_UNSET_KEY}"},
		{"args", "stages:\n  - name: a\n    exec: {command: cat, args: [\"${REDRIVE_TEST_UNSET_ARG}\"]}\n", "p.yaml:3:32: stage \"a\": args uses ${REDRIVE_TEST_UNSET_ARG}"},
		{"missing command", "stages:\n  - name: a\n    exec:\n      command: no-such-command-redrive\n", "p.yaml:4:16: stage \"a\": command \"no-such-command-redrive\" not found"},
		{"missing script", "stages:\n  - name: a\n    exec:\n      command: ./missing.sh\n", "p.yaml:4:16: stage \"a\": command \"./missing.sh\" not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("p.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Pipeline()
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Pipeline() = %v, want an ErrInvalidSpec starting %q", err, tc.want)
			}
		})
	}
	// A variable set to the empty string is defined.
	s, err := Parse("p.yaml", []byte("stages:\n  - name: a\n    http: {url: \"http://127.0.0.1/${REDRIVE_TEST_SET}\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pipeline(); err != nil {
		t.Errorf("Pipeline with a set, empty variable: %v", err)
	}
}

// TestOtherInputIsAnotherRun: jan/items.jsonl and then feb/items.jsonl are
// two runs; February's items are all processed and its output holds only
// them. Naming January's run for February's input is an error.
func TestOtherInputIsAnotherRun(t *testing.T) {
	dir := t.TempDir()
	spec, err := Parse(filepath.Join(dir, "p.yaml"), []byte("name: p\nstages:\n  - name: a\n    exec: {command: cat}\n"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	jan := write("jan/items.jsonl", "{\"id\": \"1\", \"m\": \"jan\"}\n{\"id\": \"2\", \"m\": \"jan\"}\n")
	feb := write("feb/items.jsonl", "{\"id\": \"2\", \"m\": \"feb\"}\n{\"id\": \"3\", \"m\": \"feb\"}\n")
	db := "sqlite:" + filepath.Join(dir, "redrive.db")
	ctx := context.Background()
	j, err := Execute(ctx, spec, Options{Input: jan, DB: db, Output: filepath.Join(dir, "jan.out")})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "feb.out")
	f, err := Execute(ctx, spec, Options{Input: feb, DB: db, Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if f.RunID == j.RunID || f.Resumed || f.Input.Added != 2 || f.Counts.Succeeded != 2 {
		t.Fatalf("feb's run = %+v, want a new run of its own 2 items (jan's run %d)", f, j.RunID)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "jan") || strings.Count(string(b), "feb") != 2 {
		t.Errorf("feb's output:\n%s", b)
	}
	// The same input resumes its run.
	again, err := Execute(ctx, spec, Options{Input: jan, DB: db})
	if err != nil || again.RunID != j.RunID || again.Input.Existing != 2 {
		t.Errorf("rerun of jan = %+v, %v; want run %d resumed", again, err, j.RunID)
	}
	_, err = Execute(ctx, spec, Options{Input: feb, DB: db, RunName: j.RunName})
	if !errors.Is(err, ErrUsage) || !errors.Is(err, redrive.ErrRunMismatch) || !strings.Contains(err.Error(), jan) {
		t.Errorf("feb's input under jan's run name: %v, want a usage error naming %s", err, jan)
	}
}
