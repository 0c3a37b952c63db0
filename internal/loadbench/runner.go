package loadbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// runRunner runs `redrive run` over a one-stage YAML pipeline whose http stage has no
// options but its request, and reads the ends of the items from its JSON summary.
func runRunner(ctx context.Context, exe, url string, items, workers int) (counts, error) {
	dir, err := os.MkdirTemp("", "redrive-overload-run-")
	if err != nil {
		return counts{}, err
	}
	defer os.RemoveAll(dir)
	spec := fmt.Sprintf(`name: overload
workers: %d
stages:
  - name: call
    http:
      method: POST
      url: %q
      body: '{"prompt": {{json .prompt}}}'
`, workers, url)
	if err := os.WriteFile(filepath.Join(dir, "pipeline.yaml"), []byte(spec), 0o644); err != nil {
		return counts{}, err
	}
	var in strings.Builder
	for i := range items {
		fmt.Fprintf(&in, `{"id":"i%d","prompt":"i%d"}`+"\n", i, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "items.jsonl"), []byte(in.String()), 0o644); err != nil {
		return counts{}, err
	}
	cmd := exec.CommandContext(ctx, exe, "run", filepath.Join(dir, "pipeline.yaml"), "--input", filepath.Join(dir, "items.jsonl"),
		"--db", "sqlite:"+filepath.Join(dir, "run.db"), "--json", "--stop-grace", "5s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run() // a run that is not completed exits non-zero; its summary says why
	var sum struct {
		Counts struct {
			Succeeded, Dead, Canceled int
		} `json:"counts"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		if ctx.Err() != nil {
			return counts{}, nil // the time bound killed it: everything is unfinished
		}
		return counts{}, fmt.Errorf("redrive run: %v: %s", runErr, bytes.TrimSpace(stderr.Bytes()))
	}
	return counts{succeeded: sum.Counts.Succeeded, dead: sum.Counts.Dead, canceled: sum.Counts.Canceled}, nil
}
