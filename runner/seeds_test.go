package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
)

// TestAttemptCapYAML runs a pipeline file with a cap of 2 attempts across
// stages: the first stage fails once (exit 75), the second is rate limited
// (exit 76) with count_rate_limit_waits, which uses up the item's second
// attempt, so every item ends dead at the second stage with the cap's
// reason after one call of it.
func TestAttemptCapYAML(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "capped.yaml")
	yaml := `name: capped
max_attempts: 2
stages:
  - name: fetch
    exec:
      command: sh
      args: [-c, 'if [ "$REDRIVE_ATTEMPT" = 1 ]; then echo "connection reset" >&2; exit 75; fi; cat']
    retry: {max_attempts: 3, base: 1ms, max_delay: 2ms}
  - name: llm_call
    exec:
      command: sh
      args: [-c, 'echo call >> calls.log; echo "retry-after: 1ms" >&2; echo "429 too many requests" >&2; exit 76']
      dir: .
    retry: {max_attempts: 3, base: 1ms, max_delay: 2ms, count_rate_limit_waits: true}
`
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "items.jsonl")
	if err := os.WriteFile(input, []byte("{\"id\": \"a\"}\n{\"id\": \"b\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p, err := spec.Pipeline()
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxAttempts != 2 || p.Stages[0].CountRateLimitWaits || !p.Stages[1].CountRateLimitWaits {
		t.Fatalf("pipeline MaxAttempts %d, CountRateLimitWaits %v %v", p.MaxAttempts, p.Stages[0].CountRateLimitWaits, p.Stages[1].CountRateLimitWaits)
	}
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sum, err := Execute(ctx, spec, Options{Input: input, Store: store, DB: "sqlite:" + filepath.Join(dir, "redrive.db")})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Counts.Dead != 2 || sum.Counts.Total != 2 {
		t.Fatalf("counts %+v, want 2 dead", sum.Counts)
	}
	dead, err := store.ListItems(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range dead {
		if r := it.Reason; r == nil || r.Stage != "llm_call" || r.Class != "rate_limited" ||
			!strings.HasPrefix(r.Error, "attempt cap of 2 across stages reached: ") {
			t.Errorf("item %s: reason %+v", it.Key, it.Reason)
		}
	}
	calls, err := os.ReadFile(filepath.Join(dir, "calls.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(calls), "call"); n != 2 {
		t.Errorf("llm_call ran %d times for 2 items, want 2 (once each)", n)
	}
}

func TestAttemptCapYAMLErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"max_attempts: -1\nstages: [{name: a}]\n", `p.yaml:1:15: max_attempts -1 must not be negative`},
		{"stages:\n  - name: a\n    retry: {count_rate_limit_waits: true, max_rate_limit_waits: 3}\n",
			`p.yaml:3:65: max_rate_limit_waits counts the waits that use up no attempt`},
		{"stages:\n  - name: a\n    retry: {count_rate_limit_waits: 1}\n", `p.yaml:3:37`},
	} {
		_, err := Parse("p.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
}
