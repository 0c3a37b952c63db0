package runner

import (
	"errors"
	"strings"
	"testing"
)

// TestExternalStage reads an external stage: its pipeline stage is
// External with no handler and no default timeout, takes the file's retry
// and rate limit, and a stage that is external and exec too is refused at
// its line; `redrive run` refuses to run a pipeline no process of its own
// could finish.
func TestExternalStage(t *testing.T) {
	s, err := Parse("p.yaml", []byte(`
stages:
  - name: fetch
    exec: {command: cat}
  - name: embed
    external: true
    retry: {max_attempts: 7}
    rate_limit: 50/s
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Pipeline()
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stages[1]
	if !st.External || st.Handle != nil || st.Timeout != 0 || st.Policy.MaxAttempts != 7 || st.RateLimit.Rate != 50 {
		t.Errorf("external stage = %+v", st)
	}
	if p.Stages[0].External || p.Stages[0].Handle == nil {
		t.Errorf("exec stage = %+v", p.Stages[0])
	}
	_, err = Parse("p.yaml", []byte("stages:\n  - name: a\n    exec: {command: cat}\n    external: true\n"))
	if err == nil || !strings.HasPrefix(err.Error(), `p.yaml:4:15: stage "a" is external`) {
		t.Errorf("external and exec: %v", err)
	}
	_, err = Execute(t.Context(), s, Options{Input: "in.jsonl", DB: "sqlite:" + t.TempDir() + "/x.db"})
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), `stage "embed" is external`) {
		t.Errorf("run of an external stage: %v", err)
	}
}
