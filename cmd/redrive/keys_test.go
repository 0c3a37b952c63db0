package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyAsTheUserGaveIt checks that the commands that take --key accept
// the id of an input line, which `redrive run` and `redrive enqueue` store
// scoped to its run ("<run>/<id>"): found in its run, or, when it is in
// several runs, refused with the runs named. `--key doc-1` used to be an
// unknown key.
func TestKeyAsTheUserGaveIt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "redrive.db")
	yaml := filepath.Join(dir, "fail.yaml")
	if err := os.WriteFile(yaml, []byte("name: fail\nstages:\n  - name: call\n    exec:\n      command: \"false\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "items.jsonl")
	if err := os.WriteFile(input, []byte("{\"id\":\"doc-1\"}\n{\"id\":\"doc-2\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A run whose items die at once (exit 1 is final).
	r := runCLI(t, nil, "--db", db, "run", yaml, "--input", input, "--json")
	var sum struct {
		RunID int64 `json:"run_id"`
	}
	decodeJSON(t, r, &sum)
	if sum.RunID == 0 {
		t.Fatalf("run: %v", r)
	}

	var items []struct {
		ID    int64
		Key   string
		RunID int64 `json:"run_id"`
	}
	decodeJSON(t, mustRun(t, 0, "--db", db, "items", "list", "--key", "doc-1", "--json"), &items)
	if len(items) != 1 || items[0].Key != fmt.Sprintf("%d/doc-1", sum.RunID) {
		t.Fatalf("items list --key doc-1 = %+v", items)
	}
	var shown itemDetail
	decodeJSON(t, mustRun(t, 0, "--db", db, "items", "show", "--key", "doc-1", "--json"), &shown)
	if shown.Item.ID != items[0].ID || shown.Item.Reason == nil {
		t.Errorf("items show --key doc-1 = %+v, want item %d, dead", shown.Item, items[0].ID)
	}
	r = mustRun(t, 0, "--db", db, "dlq", "list", "--key", "doc-2")
	wantContains(t, "dlq list --key", r.stdout, fmt.Sprintf("%d/doc-2", sum.RunID))
	r = mustRun(t, 0, "--db", db, "dlq", "redrive", "--key", "doc-2", "--dry-run")
	wantContains(t, "dlq redrive --key", r.stdout, "1 item would be redriven")

	// The same file enqueued as a second run: doc-1 is now in two runs.
	var res enqueueResult
	decodeJSON(t, mustRun(t, 0, "--db", db, "enqueue", yaml, "--input", input, "--run", "again", "--json"), &res)
	r = mustRun(t, 2, "--db", db, "items", "show", "--key", "doc-1")
	wantContains(t, "ambiguous key", r.stderr, "--key", "2 runs", fmt.Sprintf("run %d", sum.RunID), fmt.Sprintf("run %d", res.RunID))
	r = mustRun(t, 0, "--db", db, "items", "show", "--key", "doc-1", "--run", fmt.Sprint(res.RunID), "--json")
	wantContains(t, "items show --key --run", r.stdout, fmt.Sprintf(`"key": "%d/doc-1"`, res.RunID))
	r = mustRun(t, 2, "--db", db, "items", "list", "--key", "doc-9", "--run", fmt.Sprint(res.RunID))
	wantContains(t, "unknown key", r.stderr, `unknown key "doc-9"`, fmt.Sprintf("%d/doc-9", res.RunID))
	if strings.Contains(r.stderr, "redrive: redrive") {
		t.Errorf("doubled prefix: %s", r.stderr)
	}
	r = mustRun(t, 3, "--db", db, "items", "show", "424242")
	wantContains(t, "missing item", r.stderr, "item 424242 does not exist")
}
