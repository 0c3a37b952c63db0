package runner

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/retry"
)

func TestParsePolicy(t *testing.T) {
	s, err := Parse("p.yaml", []byte(`
stages:
  - name: a
    exec: {command: sh, args: [-c, "cat", 1]}
    timeout: 2s
    retry: {max_attempts: 4, base: 30s, multiplier: 4, max_delay: 10m, jitter: 0.2}
  - name: b
    http: {url: "http://x/{{.id}}"}
    retry: {jitter: 0, backoff: fixed, base: 100ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "p" || s.Stages[0].Exec.Args[2] != "1" || time.Duration(s.Stages[0].Timeout) != 2*time.Second {
		t.Fatalf("spec %+v", s)
	}
	p, err := s.StagePolicy("a")
	if err != nil {
		t.Fatal(err)
	}
	if p.Attempts() != 4 || p.Nominal(1) != 30*time.Second || p.Nominal(3) != 480*time.Second {
		t.Fatalf("policy a %+v", p)
	}
	if lo, hi := p.Bounds(3); lo != 384*time.Second || hi != 576*time.Second {
		t.Fatalf("bounds %v %v", lo, hi)
	}
	p, _ = s.StagePolicy("b")
	if p.JitterMode != retry.JitterNone || p.Backoff != retry.BackoffConstant {
		t.Fatalf("policy b %+v", p)
	}
	if _, err := s.StagePolicy("c"); err == nil {
		t.Fatal("unknown stage accepted")
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"stages:\n  - name: a\n    exec: {command: sh}\n    bogus: 1\n", `p.yaml:4:5: unknown key "bogus"`},
		{"stages:\n  - name: a\n    exec: {command: sh}\n    timeout: 5\n", `p.yaml:4:14: invalid duration "5"`},
		{"stages:\n  - name: a\n    name: b\n", `p.yaml:3:5: key "name" appears twice`},
		{"stages:\n  - name: a\n  - name: a\n", `p.yaml:3:11: two stages are named "a"`},
		{"run: {failure_budget: 2}\nstages: [{name: a}]\n", `p.yaml:1:23: failure_budget 2 must be between 0 and 1`},
		{"stages:\n  - name: a\n    retry: {multiplier: 0.5}\n", `p.yaml:3:25: multiplier 0.5 must be at least 1`},
		{"stages:\n  - name: a\n    retry: {base: 2m}\n", `p.yaml:3:19: base 2m0s exceeds the default max_delay`},
		{"stages:\n  - name: a\n    http: {url: '{{.x'}\n", `p.yaml:3:17: stage "a": url template`},
		{"stages: {a: 1}\n", `p.yaml:1:9: want a list`},
		{"", `p.yaml:1: empty pipeline file`},
	} {
		_, err := Parse("p.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
}

func TestReadLines(t *testing.T) {
	in := "{\"id\": \"a\"}\n\n{\"id\": 7, \"x\": 1}\n[1, 2]\n{bad\n{\"id\": \"a\"}\n\"s\" 1\n{\"x\": 2}"
	lines, err := readLines(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(lines))
	for i, l := range lines {
		got[i] = l.ID
		if l.Invalid != "" {
			got[i] = "!" + strings.SplitN(l.ID, ":", 3)[1]
		}
	}
	h := hashID([]byte("[1, 2]"))
	want := "a,7," + h + ",!5,!6,!7," + hashID([]byte(`{"x": 2}`))
	if strings.Join(got, ",") != want {
		t.Fatalf("ids %v, want %v", strings.Join(got, ","), want)
	}
	if !strings.HasPrefix(lines[3].Invalid, "invalid input: line 5: ") || !strings.Contains(lines[4].Invalid, `duplicate id "a" (first on line 1)`) {
		t.Fatalf("invalid reasons %q %q", lines[3].Invalid, lines[4].Invalid)
	}
	if len(h) != 32 {
		t.Fatalf("hash id %q is not 16 bytes of hex", h)
	}
}

func TestReadLinesOrderAt(t *testing.T) {
	in := `{"id": "a", "order_at": "2026-11-20T09:30:00Z"}
{"id": "b"}
{"id": "c", "order_at": "yesterday"}
{"id": "d", "order_at": 1700000000}
`
	lines, err := readLines(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 20, 9, 30, 0, 0, time.UTC); !lines[0].OrderAt.Equal(want) || lines[0].Invalid != "" {
		t.Errorf("line 1: OrderAt %v, invalid %q; want %v", lines[0].OrderAt, lines[0].Invalid, want)
	}
	if !lines[1].OrderAt.IsZero() || lines[1].Invalid != "" {
		t.Errorf("line 2: OrderAt %v, invalid %q; want none", lines[1].OrderAt, lines[1].Invalid)
	}
	for i, want := range map[int]string{2: `line 3: field order_at: want an RFC 3339 time such as "2026-11-23T09:00:00Z", got "yesterday"`,
		3: `line 4: field order_at: want an RFC 3339 time such as "2026-11-23T09:00:00Z", got 1700000000`} {
		if !strings.Contains(lines[i].Invalid, want) {
			t.Errorf("line %d: invalid %q, want %q", i+1, lines[i].Invalid, want)
		}
	}
}

func TestExpandEnvAndRedact(t *testing.T) {
	t.Setenv("RUNNER_TEST_TOKEN", "tok")
	if got := expandEnv("Bearer ${RUNNER_TEST_TOKEN} $HOME"); got != "Bearer tok $HOME" {
		t.Fatalf("expandEnv: %q", got)
	}
	if got := redactURL("http://user:pw@host/x?key=secret"); got != "http://host/x" {
		t.Fatalf("redactURL: %q", got)
	}
}
