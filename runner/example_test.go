package runner_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/redrive/redrive/runner"
	"github.com/redrive/redrive/sqlite"
)

// Run a YAML pipeline over a JSONL file, as `redrive run` does: one exec
// stage (cat, which passes each item's JSON through) on the embedded SQLite
// store. The summary's counts always add up to the input's lines.
func ExampleExecute() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "redrive-runner-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	pipeline := filepath.Join(dir, "pipeline.yaml")
	input := filepath.Join(dir, "items.jsonl")
	output := filepath.Join(dir, "out.jsonl")
	yaml := `name: echo
workers: 2
stages:
  - name: copy
    exec:
      command: cat
    timeout: 5s
    retry: {max_attempts: 2, base: 10ms}
`
	if err := os.WriteFile(pipeline, []byte(yaml), 0o644); err != nil {
		fmt.Println(err)
		return
	}
	items := `{"id": "doc-1", "text": "hello"}
{"id": "doc-2", "text": "world"}
`
	if err := os.WriteFile(input, []byte(items), 0o644); err != nil {
		fmt.Println(err)
		return
	}

	spec, err := runner.LoadFile(pipeline)
	if err != nil {
		fmt.Println(err) // file:line:column: what is wrong
		return
	}
	dbPath := filepath.Join(dir, "redrive.db")
	store, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	sum, err := runner.Execute(ctx, spec, runner.Options{
		Input:  input,
		DB:     "sqlite:" + dbPath, // named in the summary's commands
		Store:  store,              // else Execute opens DB itself
		Output: output,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := sum.Counts
	fmt.Printf("run %q: %s, exit status %d\n", sum.RunName, sum.Status, sum.ExitCode())
	fmt.Printf("input: %d items, %d added, %d invalid\n", sum.Input.Items, sum.Input.Added, sum.Input.Invalid)
	fmt.Printf("items: %d total = %d succeeded + %d dead + %d canceled\n", c.Total, c.Succeeded, c.Dead, c.Canceled)
	out, err := os.ReadFile(output)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(out))
	// Output:
	// run "echo:items.jsonl@597c96c07f44": completed, exit status 0
	// input: 2 items, 2 added, 0 invalid
	// items: 2 total = 2 succeeded + 0 dead + 0 canceled
	// {"id":"doc-1","output":{"id":"doc-1","text":"hello"}}
	// {"id":"doc-2","output":{"id":"doc-2","text":"world"}}
}

// Parse validates a pipeline file and gives each stage's retry policy as
// the runner uses it; mistakes are reported with their line and column.
func ExampleParse() {
	spec, err := runner.Parse("pipeline.yaml", []byte(`name: llm-batch
stages:
  - name: prepare
    exec: {command: ./bin/prepare}
    retry: {max_attempts: 1}
  - name: llm_call
    http: {url: "https://api.example.com/v1/complete"}
    retry: {max_attempts: 4, base: 30s, multiplier: 4, jitter: 0.2, max_delay: 10m}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(spec.Name, spec.StageNames())
	p, err := spec.StagePolicy("llm_call")
	if err != nil {
		fmt.Println(err)
		return
	}
	for attempt := 1; attempt < p.Attempts(); attempt++ {
		lo, hi := p.Bounds(attempt)
		fmt.Printf("after attempt %d: %v (%v to %v)\n", attempt, p.Nominal(attempt), lo, hi)
	}

	_, err = runner.Parse("pipeline.yaml", []byte(`stages:
  - name: fetch
    exec: {command: curl}
    retries: 3
`))
	fmt.Println(errors.Is(err, runner.ErrInvalidSpec))
	fmt.Println(err)
	// Output:
	// llm-batch [prepare llm_call]
	// after attempt 1: 30s (24s to 36s)
	// after attempt 2: 2m0s (1m36s to 2m24s)
	// after attempt 3: 8m0s (6m24s to 9m36s)
	// true
	// pipeline.yaml:4:5: unknown key "retries" (want one of: name, exec, http, external, retry, timeout, concurrency, rate_limit, burst, max_in_flight, dependency, max_limited)
}
