package main

// The tests of the command run the real binary, built once in TestMain,
// against real databases filled through the store API.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
)

// binPath is the redrive binary under test.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "redrive-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdtemp:", err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "redrive")
	build := exec.Command("go", "build", "-o", binPath, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is what one run of the binary produced.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// cleanEnv is the environment without redrive's own variables, so that the
// developer's settings do not leak into tests.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "REDRIVE_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// runCLI runs the binary with args; stdin is /dev/null (not a terminal).
func runCLI(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = cleanEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// mustRun runs the binary and fails the test unless it exits with want.
func mustRun(t *testing.T, want int, args ...string) result {
	t.Helper()
	r := runCLI(t, nil, args...)
	if r.code != want {
		t.Fatalf("redrive %s: want exit %d, got %v", strings.Join(args, " "), want, r)
	}
	return r
}

// decodeJSON parses r's stdout into v.
func decodeJSON(t *testing.T, r result, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("parse JSON: %v\n%s", err, r.stdout)
	}
}

// fixture is the data seed writes.
type fixture struct {
	db    string           // --db value
	run1  int64            // pipeline ocr: 8 items
	run2  int64            // pipeline webhook: 2 items
	ids   map[string]int64 // item IDs by key
	base  time.Time        // the seeding clock's start
	extra []string         // extra arguments for every command (--pg-schema)
}

// args returns the command line with the fixture's database.
func (f *fixture) args(args ...string) []string {
	return append(append(args, "--db", f.db), f.extra...)
}

// step is one scripted attempt.
type step struct {
	outcome redrive.Outcome
	class   string
	err     string
	delay   time.Duration
}

// okStep is a successful attempt.
var okStep = step{outcome: redrive.OutcomeSucceeded}

func retryStep(msg string) step {
	return step{outcome: redrive.OutcomeRetry, class: "retryable", err: msg, delay: 30 * time.Second}
}

func deadStep(class, msg string) step {
	return step{outcome: redrive.OutcomeDead, class: class, err: msg}
}

// Pipelines of the fixture.
var stagesOf = map[string][]string{
	"ocr":     {"fetch", "extract"},
	"webhook": {"deliver"},
}

// newSQLiteFixture seeds a new SQLite file.
func newSQLiteFixture(t *testing.T) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "redrive.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	f := seed(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f.db = "sqlite:" + path
	return f
}

// seed fills s through the store API:
//
//	run1 (ocr: fetch, extract), 8 items:
//	  a succeeded; b succeeded after one retry at fetch;
//	  c dead at extract (retryable, "connection reset by peer", 3 attempts);
//	  d dead at fetch (final, "HTTP 404: document not found");
//	  e dead at fetch (final, "HTTP 400: bad document") after a rate-limited wait;
//	  g dead at enqueue (invalid_input); h canceled; f pending.
//	run2 (webhook: deliver): w1 dead (final, "HTTP 410: gone"), w2 succeeded.
func seed(t *testing.T, s redrive.Store) *fixture {
	t.Helper()
	ctx := context.Background()
	now := time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Second)
	f := &fixture{ids: map[string]int64{}, base: now}
	scripts := map[string][]step{
		"a":  {okStep, okStep},
		"b":  {retryStep("timeout: api.example.com did not answer"), okStep, okStep},
		"c":  {okStep, retryStep("connection reset by peer"), retryStep("connection reset by peer"), deadStep("retryable", "connection reset by peer")},
		"d":  {deadStep("final", "HTTP 404: document not found")},
		"e":  {{outcome: redrive.OutcomeRateLimited, class: "rate_limited", err: "HTTP 429: too many requests", delay: 45 * time.Second}, deadStep("final", "HTTP 400: bad document")},
		"w1": {deadStep("final", "HTTP 410: gone")},
		"w2": {okStep},
	}
	enqueue := func(runID int64, pipeline string, items ...redrive.NewItem) {
		t.Helper()
		res, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: runID, Pipeline: pipeline, Stage: stagesOf[pipeline][0], Items: items, Now: now})
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		for i, r := range res {
			f.ids[items[i].Key] = r.ID
		}
	}
	r1, _, err := s.CreateRun(ctx, "ocr", redrive.RunOptions{Name: "nightly", FailureBudget: 0.9}, now)
	if err != nil {
		t.Fatalf("create run: %v", err)
	}
	r2, _, err := s.CreateRun(ctx, "webhook", redrive.RunOptions{}, now)
	if err != nil {
		t.Fatalf("create run: %v", err)
	}
	f.run1, f.run2 = r1.ID, r2.ID
	var ocr []redrive.NewItem
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		ocr = append(ocr, redrive.NewItem{Key: k, Payload: []byte(`{"doc":"` + k + `"}`)})
	}
	ocr = append(ocr, redrive.NewItem{Key: "g", Invalid: "line 7: not JSON"})
	enqueue(f.run1, "ocr", ocr...)
	enqueue(f.run2, "webhook", redrive.NewItem{Key: "w1", Payload: []byte(`{}`)}, redrive.NewItem{Key: "w2", Payload: []byte(`{}`)})

	keyOf := map[int64]string{}
	for k, id := range f.ids {
		keyOf[id] = k
	}
	for round := 0; round < 10; round++ {
		now = now.Add(time.Minute)
		leases, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "seed", Pipelines: []string{"ocr", "webhook"}, Limit: 100, LeaseUntil: now.Add(time.Minute), Now: now})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if len(leases) == 0 {
			break
		}
		var cs []redrive.Completion
		for _, l := range leases {
			it := l.Item
			k := keyOf[it.ID]
			if len(scripts[k]) == 0 {
				t.Fatalf("item %s claimed with no script left", k)
			}
			st := scripts[k][0]
			scripts[k] = scripts[k][1:]
			stages := stagesOf[it.Pipeline]
			rec := redrive.Attempt{ItemID: it.ID, RunID: it.RunID, Pipeline: it.Pipeline, Stage: it.Stage, StageIndex: it.StageIndex,
				Number: it.Attempt + 1, Outcome: st.outcome, Class: st.class, Error: st.err,
				StartedAt: now, FinishedAt: now.Add(150 * time.Millisecond), Delay: st.delay,
				ConfigHash: redrive.Stage{Name: it.Stage}.ConfigHash()}
			c := redrive.Completion{ItemID: it.ID, Token: l.Token, Stage: it.Stage, StageIndex: it.StageIndex, Record: rec, Now: now.Add(150 * time.Millisecond)}
			switch st.outcome {
			case redrive.OutcomeSucceeded:
				if it.StageIndex+1 < len(stages) {
					c.State, c.StageIndex, c.Stage, c.Attempt, c.NextAt = redrive.StatePending, it.StageIndex+1, stages[it.StageIndex+1], 0, now
					c.Payload = []byte(`{"fetched":true}`)
				} else {
					c.State, c.Attempt = redrive.StateSucceeded, it.Attempt+1
					c.Payload = []byte(`{"done":true}`)
				}
			case redrive.OutcomeRetry:
				c.State, c.Attempt, c.NextAt = redrive.StatePending, it.Attempt+1, now.Add(st.delay)
			case redrive.OutcomeRateLimited:
				c.State, c.Attempt, c.RateLimitWaits, c.NextAt = redrive.StatePending, it.Attempt, it.RateLimitWaits+1, now.Add(st.delay)
			case redrive.OutcomeDead:
				c.State, c.Attempt = redrive.StateDead, it.Attempt+1
				c.Reason = &redrive.Reason{Stage: it.Stage, Class: st.class, Error: st.err, Attempts: it.Attempt + 1, At: c.Now}
			}
			cs = append(cs, c)
		}
		applied, err := s.Complete(ctx, cs)
		if err != nil {
			t.Fatalf("complete: %v", err)
		}
		for i, a := range applied {
			if !a {
				t.Fatalf("completion %d not applied", i)
			}
		}
	}
	for k, sc := range scripts {
		if len(sc) > 0 {
			t.Fatalf("item %s has %d steps left", k, len(sc))
		}
	}
	now = now.Add(time.Minute)
	enqueue(f.run1, "ocr", redrive.NewItem{Key: "h", Payload: []byte(`{}`)})
	if n, err := s.CancelPending(ctx, redrive.ItemFilter{RunID: f.run1}, redrive.Reason{Class: redrive.ClassCanceled, Error: "canceled by operator", At: now}); err != nil || n != 1 {
		t.Fatalf("cancel: %d, %v", n, err)
	}
	enqueue(f.run1, "ocr", redrive.NewItem{Key: "f", Payload: []byte(`{}`)})
	if err := s.SetRunStatus(ctx, f.run2, redrive.RunPartialSuccess, "", now); err != nil {
		t.Fatalf("set run status: %v", err)
	}
	return f
}

// openFixture opens the fixture's database for checks; the caller closes it.
func openFixture(t *testing.T, f *fixture) redrive.Store {
	t.Helper()
	s, _, err := openStoreWith(context.Background(), f.db, openOptions{Schema: schemaOf(f), MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func schemaOf(f *fixture) string {
	for i, a := range f.extra {
		if a == "--pg-schema" && i+1 < len(f.extra) {
			return f.extra[i+1]
		}
	}
	return defaultPGSchema
}

// countItems counts the fixture's items in state st.
func countItems(t *testing.T, f *fixture, st redrive.State) int {
	t.Helper()
	s := openFixture(t, f)
	defer s.Close()
	n, err := s.Count(context.Background(), redrive.ItemFilter{States: []redrive.State{st}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// wantContains fails unless s contains every one of subs.
func wantContains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s lacks %q:\n%s", what, sub, s)
		}
	}
}
