package runner

import (
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

func TestParseFlowControl(t *testing.T) {
	s, err := Parse("p.yaml", []byte(`
stages:
  - name: plain
    exec: {command: sh}
  - name: llm
    http: {url: "http://127.0.0.1:1/"}
    rate_limit: 3000/min
    burst: 5
    max_in_flight: 4
    dependency: model-api
    max_limited: 2m
  - name: embed
    http: {url: "http://127.0.0.1:1/"}
    rate_limit: 50
    dependency: model-api
  - name: local
    exec: {command: sh}
    rate_limit: off
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Pipeline()
	if err == nil {
		t.Fatal("two stages of one dependency with different limits were accepted at Pipeline")
	}
	_ = p
	s.Stages[2].RateLimit, s.Stages[2].Burst, s.Stages[2].MaxLimited = s.Stages[1].RateLimit, 5, s.Stages[1].MaxLimited
	p, err = s.Pipeline()
	if err != nil {
		t.Fatal(err)
	}
	if p.Stages[0].RateLimit != (redrive.RateLimit{}) || p.Stages[0].Dependency != "" {
		t.Fatalf("a stage with no options: %+v", p.Stages[0].RateLimit)
	}
	want := redrive.RateLimit{Rate: 50, Burst: 5, MaxLimited: 2 * time.Minute}
	if llm := p.Stages[1]; llm.RateLimit != want || llm.Concurrency != 4 || llm.Dependency != "model-api" {
		t.Fatalf("llm: %+v concurrency %d dependency %q", llm.RateLimit, llm.Concurrency, llm.Dependency)
	}
	if !p.Stages[3].RateLimit.Off {
		t.Fatal("rate_limit: off did not turn flow control off")
	}
}

func TestParseFlowControlErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"stages:\n  - name: a\n    rate_limit: fast\n", `p.yaml:3:17: invalid rate "fast"`},
		{"stages:\n  - name: a\n    rate_limit: 5/day\n", `p.yaml:3:17: invalid rate "5/day": the unit after '/' is s, min or h`},
		{"stages:\n  - name: a\n    rate_limit: -3/s\n", `p.yaml:3:17: invalid rate "-3/s"`},
		{"stages:\n  - name: a\n    burst: -1\n", `p.yaml:3:12: burst -1 must not be negative`},
		{"stages:\n  - name: a\n    max_in_flight: 2\n    concurrency: 3\n", `p.yaml:3:20: max_in_flight 2 and concurrency 3 disagree`},
		{"stages:\n  - name: a\n    dependency: 'a b'\n", `p.yaml:3:17: dependency name "a b"`},
	} {
		_, err := Parse("p.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.yaml, err, c.want)
		}
	}
}

// TestSummarySaysTimeWaitingOnLimit: the run's accounting says how much of its time
// was spent waiting on rate limits, in all and by stage.
func TestSummarySaysTimeWaitingOnLimit(t *testing.T) {
	s := &Summary{Status: redrive.RunCompleted, WaitingOnLimit: &redrive.LimitedTime{Total: 12300 * time.Millisecond,
		Elapsed: time.Minute, ByStage: map[string]time.Duration{"llm_call": 12 * time.Second, "embed": 300 * time.Millisecond}}}
	var b strings.Builder
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if want := "waiting on the limit: 12.3s of 60.0s (20.5%); embed 0.3s, llm_call 12.0s\n"; !strings.Contains(b.String(), want) {
		t.Fatalf("summary:\n%s\nwant the line %q", b.String(), want)
	}
}
