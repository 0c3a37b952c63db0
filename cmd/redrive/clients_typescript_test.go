package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/redrive/redrive/sqlite"
)

// tsSummary is what examples/clients/typescript's demo prints.
type tsSummary struct {
	RunID     int64  `json:"run_id"`
	RunStatus string `json:"run_status"`
	RunCounts struct {
		Total     int `json:"total"`
		Succeeded int `json:"succeeded"`
		Dead      int `json:"dead"`
	} `json:"run_counts"`
	Added     int            `json:"added"`
	Created   bool           `json:"created"`
	Existing  int            `json:"existing_on_retry"`
	SameIDs   bool           `json:"same_ids"`
	States    map[string]int `json:"states"`
	Listed    int            `json:"listed"`
	Pages     int            `json:"pages"`
	OutputsOK int            `json:"outputs_matching"`
	ExportN   int            `json:"export_lines"`
	ExportOK  int            `json:"export_matching"`
	Succeeded *tsItem        `json:"succeeded_item"`
	Dead      *tsItem        `json:"dead_item"`
}

type tsItem struct {
	ID          int64  `json:"id"`
	Key         string `json:"key"`
	State       string `json:"state"`
	Attempts    int    `json:"attempts"`
	OutputOK    bool   `json:"output_matching"`
	ReasonStage string `json:"reason_stage"`
	ReasonError string `json:"reason_error"`
}

// TestTypeScriptClient generates a typed client from docs/openapi.yaml
// (openapi-typescript), compiles examples/clients/typescript with tsc and
// runs its demo against a real `redrive serve`: it submits items (twice,
// with one Idempotency-Key), waits for the run with ?wait=30s, lists the
// items with their outputs a page at a time, reads one succeeded and one
// dead item and exports the results as JSON lines. A description that
// drifts from what the demo uses fails the compile; one that drifts from
// the server fails the demo's checks or this test's. It needs node and npm
// (the packages are pinned by the example's package-lock.json); without
// them it skips, unless CI is set.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is required in CI for the TypeScript client: %v", tool, err)
			}
			t.Skipf("%s not installed", tool)
		}
	}
	const dir = "../../examples/clients/typescript"
	run := func(name string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return out
	}
	run("bash", "../../../scripts/npm-ci.sh", ".")
	// Generates src/api.d.ts from docs/openapi.yaml, then tsc.
	run("npm", "run", "--silent", "build")

	url, db := servedPipeline(t)
	const count, dieEvery, pageSize = 30, 10, 7 // items 0, 10 and 20 die
	const dead = count / dieEvery
	cmd := exec.Command("node", "dist/demo.js", "--url", url, "--pipeline", "echo", "--run", "ts-demo",
		"--count", fmt.Sprint(count), "--die-every", fmt.Sprint(dieEvery), "--page-size", fmt.Sprint(pageSize))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDRIVE_TOKEN="+clientToken)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("typescript demo: %v\n%s\n%s", err, out, stderr)
	}
	var s tsSummary
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("demo output %q: %v", out, err)
	}
	if s.Added != count || !s.Created || s.Existing != count || !s.SameIDs {
		t.Errorf("submit: added %d (created %v), retried submit found %d existing (same IDs %v); want %d, true, %d, true",
			s.Added, s.Created, s.Existing, s.SameIDs, count, count)
	}
	if s.RunStatus == "running" || s.RunCounts.Total != count || s.RunCounts.Succeeded != count-dead || s.RunCounts.Dead != dead {
		t.Errorf("waited run: status %q, counts %+v; want finished with %d succeeded and %d dead", s.RunStatus, s.RunCounts, count-dead, dead)
	}
	wantPages := (count + pageSize - 1) / pageSize
	if s.Listed != count || s.Pages < wantPages || s.States["succeeded"] != count-dead || s.States["dead"] != dead {
		t.Errorf("listing: %d items in %d pages, states %v; want %d in %d pages or more, %d succeeded, %d dead",
			s.Listed, s.Pages, s.States, count, wantPages, count-dead, dead)
	}
	if s.OutputsOK != count-dead {
		t.Errorf("%d listed outputs equal their inputs, want %d", s.OutputsOK, count-dead)
	}
	if s.ExportN != count-dead || s.ExportOK != count-dead {
		t.Errorf("export: %d lines, %d with outputs equal to their inputs; want %d", s.ExportN, s.ExportOK, count-dead)
	}
	if it := s.Succeeded; it == nil || it.State != "succeeded" || it.Attempts < 1 || !it.OutputOK {
		t.Errorf("succeeded item read alone = %+v; want its output and attempts", it)
	}
	if it := s.Dead; it == nil || it.State != "dead" || it.ReasonStage != "shout" || !strings.Contains(it.ReasonError, "refused") {
		t.Errorf("dead item read alone = %+v; want the reason from stage shout", it)
	}

	// The server's store agrees with what the client was told.
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := st.GetRun(context.Background(), s.RunID)
	if err != nil || r.Name != "ts-demo" || r.Counts.Total != count || r.Counts.Succeeded != count-dead {
		t.Errorf("run %d in the store = %+v, %v", s.RunID, r, err)
	}
}
