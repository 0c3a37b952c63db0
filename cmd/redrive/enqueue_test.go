package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEnqueue(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "redrive.db")
	yaml := filepath.Join(dir, "echo.yaml")
	if err := os.WriteFile(yaml, []byte("name: echo\nstages:\n  - name: shout\n    exec:\n      command: cat\n  - name: again\n    exec:\n      command: cat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "items.jsonl")
	if err := os.WriteFile(input, []byte("{\"id\":\"a\",\"v\":1}\n{\"id\":\"b\",\"v\":2}\nnot json\n\n{\"v\":3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var res enqueueResult
	decodeJSON(t, mustRun(t, 0, "--db", db, "enqueue", yaml, "--input", input, "--json"), &res)
	if res.RunID == 0 || !strings.HasPrefix(res.RunName, "echo:items.jsonl@") || res.Items != 4 || res.Added != 4 || res.Existing != 0 || res.Invalid != 1 {
		t.Fatalf("first enqueue = %+v", res)
	}
	// The same file again, by name: nothing is added twice.
	r := mustRun(t, 0, "--db", db, "enqueue", "echo", "--stage", "shout", "--input", input)
	wantContains(t, "second enqueue", r.stdout, fmt.Sprintf("run %d (%s)", res.RunID, res.RunName), "4 items, 0 new, 4 existing")

	var items []struct {
		Key, Stage string
		State      string
	}
	decodeJSON(t, mustRun(t, 0, "--db", db, "items", "list", "--run", fmt.Sprint(res.RunID), "--json"), &items)
	states := map[string]int{}
	for _, it := range items {
		states[it.State]++
		if it.Stage != "shout" {
			t.Errorf("item %s at stage %q, want the first stage", it.Key, it.Stage)
		}
	}
	if states["pending"] != 3 || states["dead"] != 1 || len(items) != 4 {
		t.Errorf("stored items: %v (%d)", states, len(items))
	}

	// Bad usage names the flag and changes nothing.
	r = mustRun(t, 2, "--db", db, "enqueue", "echo", "--input", input)
	wantContains(t, "no --stage", r.stderr, "--stage")
	r = mustRun(t, 2, "--db", db, "enqueue", yaml)
	wantContains(t, "no --input", r.stderr, "--input")
	r = mustRun(t, 2, "--db", db, "enqueue", yaml, "--input", input+".missing")
	wantContains(t, "missing input", r.stderr, "--input")
	decodeJSON(t, mustRun(t, 0, "--db", db, "items", "list", "--run", fmt.Sprint(res.RunID), "--json"), &items)
	if len(items) != 4 {
		t.Errorf("bad usage changed the run: %d items", len(items))
	}
}

// TestRunMetricsAddr checks that `redrive run --metrics-addr` serves the
// engine's metrics while the run lasts.
func TestRunMetricsAddr(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gate := filepath.Join(dir, "go")
	// Item 1 passes at once; item 2 waits for the gate file, so the run
	// lasts until the test has read the metrics.
	script := fmt.Sprintf(`read -r x; case "$x" in *wait*) while [ ! -f %q ]; do sleep 0.05; done;; esac; echo "$x"`, gate)
	yaml := filepath.Join(dir, "gated.yaml")
	spec := fmt.Sprintf("name: gated\nstages:\n  - name: work\n    exec:\n      command: sh\n      args: [\"-c\", %q]\n", script)
	if err := os.WriteFile(yaml, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "items.jsonl")
	if err := os.WriteFile(input, []byte("{\"id\":\"fast\"}\n{\"id\":\"wait\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(binPath, "--db", "sqlite:"+filepath.Join(dir, "r.db"), "--log-format", "json",
		"run", yaml, "--input", input, "--metrics-addr", addr, "--json")
	cmd.Env = cleanEnv()
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		os.WriteFile(gate, nil, 0o644)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	var body string
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			// The engine's counters and the store-derived gauges (refreshed
			// on their own schedule) both show up.
			// So does the stage's flow control (redrive_flow_*).
			if strings.Contains(body, `redrive_attempts_total{`) && strings.Contains(body, `outcome="succeeded"`) &&
				strings.Contains(body, `redrive_items{`) && strings.Contains(body, `pipeline="gated"`) &&
				strings.Contains(body, `redrive_flow_slow_start{dependency="gated/work"}`) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no attempt, item or flow gauge of pipeline gated on /metrics: %v\n%s\nstderr:\n%s", err, body, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("run: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not end after the gate opened")
	}
	var sum struct{ Status string }
	if err := json.Unmarshal([]byte(stdout.String()), &sum); err != nil || sum.Status != "completed" {
		t.Errorf("summary %q: %v", stdout.String(), err)
	}
	// --log-format json: the metrics server's line is JSON.
	wantContains(t, "stderr", stderr.String(), `"msg":"redrive: serving metrics"`)
}

func TestServeTokenFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "tokens")
	if err := os.WriteFile(bad, []byte("ok read 0123456789abcdef0123\nbad writer 0123456789abcdefXYZ\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, 2, "--db", "sqlite:"+filepath.Join(dir, "x.db"), "serve", "--addr", "127.0.0.1:0", "--token-file", bad)
	wantContains(t, "stderr", r.stderr, "--token-file", bad+":2", `unknown scope "writer"`)
	if strings.Contains(r.stderr, "0123456789abcdefXYZ") {
		t.Errorf("the error shows a secret: %s", r.stderr)
	}
	r = runCLI(t, cleanEnv(envAPITokens+"=short read abc"), "--db", "sqlite:"+filepath.Join(dir, "x.db"), "serve", "--addr", "127.0.0.1:0")
	if r.code != 2 || !strings.Contains(r.stderr, envAPITokens+":1") || strings.Contains(r.stderr, " abc") {
		t.Errorf("bad %s: %v", envAPITokens, r)
	}
	r = mustRun(t, 2, "--log-format", "xml", "runs", "list")
	wantContains(t, "stderr", r.stderr, "--log-format", "xml")
	r = mustRun(t, 2, "--db", "sqlite:"+filepath.Join(dir, "x.db"), "serve", "--accept", "nostage")
	wantContains(t, "stderr", r.stderr, "--accept", "NAME:FIRST_STAGE")
}

// TestEnqueueChecksPipeline checks that `redrive enqueue` refuses a
// pipeline given by name that nothing knows, a --stage that is not the
// first stage its items start at, and an input without items, changing
// nothing; and that it warns, on stderr and in --json, when no live worker
// serves the pipeline. It used to create runs whose items no worker would
// ever take.
func TestEnqueueChecksPipeline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "redrive.db")
	yaml := filepath.Join(dir, "echo.yaml")
	if err := os.WriteFile(yaml, []byte("name: echo\nstages:\n  - name: shout\n    exec:\n      command: cat\n  - name: again\n    exec:\n      command: cat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "items.jsonl")
	if err := os.WriteFile(input, []byte("{\"id\":\"a\"}\n{\"id\":\"b\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, []byte("\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runs := func() string {
		t.Helper()
		return mustRun(t, 0, "--db", db, "runs", "list", "--json").stdout
	}

	r := mustRun(t, 2, "--db", db, "enqueue", "ehco", "--stage", "shout", "--input", input)
	wantContains(t, "unknown pipeline", r.stderr, `unknown pipeline "ehco"`, "no live worker serves it", "pipeline file")
	r = mustRun(t, 2, "--db", db, "enqueue", yaml, "--input", empty)
	wantContains(t, "empty input", r.stderr, "--input", "no items")
	if got := runs(); strings.TrimSpace(got) != "[]" {
		t.Fatalf("refused enqueues made runs: %s", got)
	}

	// From its file: accepted, with a warning, since nothing serves echo.
	var res enqueueResult
	r = mustRun(t, 0, "--db", db, "enqueue", yaml, "--input", input, "--json")
	decodeJSON(t, r, &res)
	wantContains(t, "no worker", r.stderr, "warning: no live worker serves pipeline echo", "2 new items stay pending")
	if !strings.Contains(res.Warning, "no live worker serves pipeline echo") || res.Added != 2 {
		t.Errorf("JSON result = %+v", res)
	}

	// By name, the stage is checked against where echo's items start.
	before := runs()
	r = mustRun(t, 2, "--db", db, "enqueue", "echo", "--stage", "again", "--input", input, "--run", "second")
	wantContains(t, "wrong stage", r.stderr, "--stage", `starts at stage "shout"`, `not "again"`)
	if got := runs(); got != before {
		t.Errorf("refused enqueue changed the runs:\n%s\n->\n%s", before, got)
	}
	r = mustRun(t, 0, "--db", db, "enqueue", "echo", "--stage", "shout", "--input", input, "--run", "second")
	wantContains(t, "right stage", r.stdout, "2 new")
}
