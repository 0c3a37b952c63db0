package runner

import (
	"strings"
	"testing"

	"github.com/redrive/redrive"
)

// TestExitCodeOfAbortedRuns: a run aborted by its failure budget exits 5;
// one canceled by an operator exits 6, not "failure budget exceeded".
func TestExitCodeOfAbortedRuns(t *testing.T) {
	budget := &Summary{Status: redrive.RunAborted, FailureBudget: Budget{Exceeded: true}}
	canceled := &Summary{Status: redrive.RunAborted, Reason: "canceled by an operator"}
	if budget.ExitCode() != ExitAborted || canceled.ExitCode() != ExitCanceled {
		t.Errorf("exit codes: budget %d, canceled %d; want %d and %d", budget.ExitCode(), canceled.ExitCode(), ExitAborted, ExitCanceled)
	}
}

// TestSummaryCommands: the summary suggests a redrive per dead class, one
// for the items an abort canceled, and the command that works them.
func TestSummaryCommands(t *testing.T) {
	s := &Summary{RunID: 7, RunName: "p:items.jsonl@abc", DB: "sqlite:my work.db", Spec: "p.yaml", Status: redrive.RunAborted,
		Input:       InputCounts{File: "in/items.jsonl"},
		Counts:      redrive.Counts{Total: 10, Succeeded: 2, Dead: 5, Canceled: 3},
		DeadByClass: map[string]int{"final": 4, "retryable": 1}}
	s.Commands = s.commands(s.Counts)
	want := map[string]string{
		"dlq_list":              "redrive dlq list --db 'sqlite:my work.db' --run 7 --state dead,canceled",
		"dlq_redrive":           "redrive dlq redrive --db 'sqlite:my work.db' --run 7",
		"dlq_redrive_final":     "redrive dlq redrive --db 'sqlite:my work.db' --run 7 --class final",
		"dlq_redrive_retryable": "redrive dlq redrive --db 'sqlite:my work.db' --run 7 --class retryable",
		"dlq_redrive_canceled":  "redrive dlq redrive --db 'sqlite:my work.db' --run 7 --state canceled",
		"work":                  "redrive run p.yaml --input in/items.jsonl --db 'sqlite:my work.db' --run-name p:items.jsonl@abc",
	}
	for k, v := range want {
		if s.Commands[k] != v {
			t.Errorf("command %s = %q, want %q", k, s.Commands[k], v)
		}
	}
	if len(s.Commands) != len(want) {
		t.Errorf("commands = %v", s.Commands)
	}
	var b strings.Builder
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, sub := range []string{"--class final   # 4 final: fix the cause first", "--state canceled   # 3 canceled when the run was aborted", "then work the redriven items: redrive run p.yaml"} {
		if !strings.Contains(out, sub) {
			t.Errorf("summary lacks %q:\n%s", sub, out)
		}
	}
}
