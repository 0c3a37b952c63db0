package main

// Tests of `redrive run`: they run the real binary (built in TestMain) over
// pipelines of exec stages (testdata/runner/stage.sh) and http stages
// (httptest servers), and read the results back from the SQLite database.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/runner"
	"github.com/redrive/redrive/sqlite"
)

// runEnv is a scratch directory for one runner test.
type runEnv struct {
	t   *testing.T
	dir string
	db  string // file path
	env []string
}

func newRunEnv(t *testing.T) *runEnv {
	t.Helper()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("testdata/runner/stage.sh")
	if err != nil {
		t.Fatal(err)
	}
	return &runEnv{t: t, dir: dir, db: filepath.Join(dir, "redrive.db"),
		env: []string{"STATE_DIR=" + state, "STAGE_SH=" + script}}
}

// write writes a file in the scratch directory and returns its path.
func (e *runEnv) write(name, content string) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// run runs `redrive run` with args plus --db; stdin is not a terminal.
func (e *runEnv) run(args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"run", "--db", "sqlite:" + e.db}, args...)...)
	cmd.Env = cleanEnv(e.env...)
	cmd.Dir = e.dir
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
		e.t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// summary runs with --json and decodes the summary, failing unless the exit
// status is want.
func (e *runEnv) summary(want int, args ...string) runner.Summary {
	e.t.Helper()
	r := e.run(append(args, "--json")...)
	if r.code != want {
		e.t.Fatalf("redrive run %s: want exit %d, got %v", strings.Join(args, " "), want, r)
	}
	var s runner.Summary
	decodeJSON(e.t, r, &s)
	c := s.Counts
	if !c.AddsUp() {
		e.t.Fatalf("counts do not add up: %+v", c)
	}
	return s
}

// items returns the run's items by input id.
func (e *runEnv) items(runID int64) map[string]redrive.Item {
	e.t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, e.db)
	if err != nil {
		e.t.Fatal(err)
	}
	defer st.Close()
	out := map[string]redrive.Item{}
	var after int64
	for {
		its, err := st.ListItems(ctx, redrive.ItemFilter{RunID: runID, AfterID: after, Limit: 500})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, it := range its {
			_, id, _ := strings.Cut(it.Key, "/")
			out[id] = it
			after = it.ID
		}
		if len(its) < 500 {
			return out
		}
	}
}

// execPipeline is a one-stage pipeline running stage.sh.
func execPipeline(name, retry string) string {
	return fmt.Sprintf(`name: %s
workers: 4
stages:
  - name: work
    exec:
      command: ${STAGE_SH}
    timeout: 10s
    retry: %s
`, name, retry)
}

func TestRunExecExitCodes(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	p := e.write("p.yaml", execPipeline("codes", "{max_attempts: 3, base: 20ms, jitter: 0, max_rate_limit_wait: 1s}"))
	modes := []string{"ok", "passthru", "retry1", "always75", "ratelimit", "rljson", "final", "notjson", "bigerr"}
	var in strings.Builder
	for _, m := range modes {
		fmt.Fprintf(&in, "{\"id\": %q, \"mode\": %q}\n", m, m)
	}
	input := e.write("in.jsonl", in.String())
	s := e.summary(runner.ExitPartial, p, "--input", input, "--output", "out.jsonl")
	if s.Counts.Total != len(modes) || s.Counts.Succeeded != 5 || s.Counts.Dead != 4 {
		t.Fatalf("counts %+v, want 9 = 5 succeeded + 4 dead", s.Counts)
	}
	items := e.items(s.RunID)
	wantDead := map[string]struct{ class, msg string }{
		"always75": {"retryable", "exit status 75: still unavailable"},
		"final":    {"final", "exit status 3: bad item: cannot be processed"},
		"notjson":  {"final", "output is not JSON: this is not json"},
		"bigerr":   {"final", "more bytes)"},
	}
	for _, m := range modes {
		it := items[m]
		w, dead := wantDead[m]
		switch {
		case dead && it.State != redrive.StateDead:
			t.Errorf("%s: state %s, want dead", m, it.State)
		case dead && (it.Reason == nil || it.Reason.Class != w.class || !strings.Contains(it.Reason.Error, w.msg)):
			t.Errorf("%s: reason %+v, want class %s and %q", m, it.Reason, w.class, w.msg)
		case !dead && it.State != redrive.StateSucceeded:
			t.Errorf("%s: state %s (%+v), want succeeded", m, it.State, it.Reason)
		}
	}
	if r := items["always75"].Reason; r == nil || r.Attempts != 3 {
		t.Errorf("always75 took %+v, want 3 attempts", r)
	}
	if r := items["bigerr"].Reason; r == nil || len(r.Error) > 5000 {
		t.Errorf("bigerr's message is not bounded: %d bytes", len(r.Error))
	}
	if s.RateLimitWaits != 2 || s.Retries != 3 { // retry1 once, always75 twice
		t.Errorf("retries %d, rate-limited waits %d; want 3 and 2", s.Retries, s.RateLimitWaits)
	}

	// --output: the succeeded items in input order with their final payloads.
	b, err := os.ReadFile(filepath.Join(e.dir, "out.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var o struct {
			ID     string          `json:"id"`
			Output json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		ids = append(ids, o.ID)
		if o.ID == "passthru" && string(o.Output) != `{"id":"passthru","mode":"passthru"}` {
			t.Errorf("passthru output %s is not its input", o.Output)
		}
		if o.ID == "ok" && string(o.Output) != `{"ok":true,"in":{"id":"ok","mode":"ok"}}` {
			t.Errorf("ok output %s", o.Output)
		}
	}
	if got := strings.Join(ids, ","); got != "ok,passthru,retry1,ratelimit,rljson" {
		t.Errorf("output ids %s, want ok,passthru,retry1,ratelimit,rljson", got)
	}
}

func TestRunMissingCommand(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	p := e.write("p.yaml", `name: missing
stages:
  - name: work
    exec: {command: no-such-command-redrive-test}
`)
	input := e.write("in.jsonl", "{\"id\": \"a\"}\n{\"id\": \"b\"}\n")
	// Found when the file loads, with its line, before any item is added.
	r := e.run(p, "--input", input)
	if r.code != exitUsage || !strings.Contains(r.stderr, p+":4:") || !strings.Contains(r.stderr, `command "no-such-command-redrive-test" not found`) {
		t.Fatalf("want exit 2 naming %s:4, got %v", p, r)
	}
	if _, err := os.Stat(e.db); err == nil {
		if items := e.items(1); len(items) != 0 {
			t.Errorf("items were added: %v", items)
		}
	}
}

func TestRunHTTP(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ID string `json:"id"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		mu.Lock()
		seen[r.URL.Path+in.ID]++
		n := seen[r.URL.Path+in.ID]
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/ok":
			fmt.Fprintf(w, `{"echo": %q, "q": %q}`, in.ID, r.URL.Query().Get("q"))
		case "/ratelimit":
			if n == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			fmt.Fprint(w, `{"ok": true}`)
		case "/flaky":
			if n == 1 {
				http.Error(w, "boom", http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, `{"ok": true}`)
		case "/bad":
			http.Error(w, `{"error": "bad prompt"}`, http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	e := newRunEnv(t)
	e.env = append(e.env, "API_TOKEN=s3cret", "BASE="+srv.URL)
	p := e.write("p.yaml", `name: web
stages:
  - name: call
    http:
      url: '{{.base}}/{{.path}}?q={{urlquery .id}}'
      body: '{"id": {{json .id}}}'
      headers: {Authorization: "Bearer ${API_TOKEN}"}
    timeout: 2s
    retry: {max_attempts: 2, base: 20ms, max_rate_limit_wait: 2s}
`)
	var in strings.Builder
	for _, c := range []struct{ id, base, path string }{
		{"ok", srv.URL, "ok"}, {"rl", srv.URL, "ratelimit"}, {"flaky", srv.URL, "flaky"},
		{"bad", srv.URL, "bad"}, {"down", closed, "ok"},
	} {
		fmt.Fprintf(&in, "{\"id\": %q, \"base\": %q, \"path\": %q}\n", c.id, c.base, c.path)
	}
	input := e.write("in.jsonl", in.String())
	start := time.Now()
	s := e.summary(runner.ExitPartial, p, "--input", input, "--output", "out.jsonl")
	if s.Counts.Succeeded != 3 || s.Counts.Dead != 2 {
		t.Fatalf("counts %+v, want 3 succeeded + 2 dead", s.Counts)
	}
	if el := time.Since(start); el < time.Second {
		t.Errorf("the run took %v: Retry-After: 1 was not honoured", el)
	}
	items := e.items(s.RunID)
	for id, want := range map[string]string{"bad": "final", "down": "retryable"} {
		it := items[id]
		if it.State != redrive.StateDead || it.Reason.Class != want {
			t.Errorf("%s: %s %+v, want dead %s", id, it.State, it.Reason, want)
		}
	}
	if r := items["bad"].Reason; !strings.Contains(r.Error, "400") || r.Attempts != 1 {
		t.Errorf("bad: %+v, want HTTP 400 after 1 attempt", r)
	}
	if r := items["down"].Reason; !strings.Contains(r.Error, "connection refused") || r.Attempts != 2 {
		t.Errorf("down: %+v, want connection refused after 2 attempts", r)
	}
	if s.RateLimitWaits != 1 {
		t.Errorf("rate-limited waits %d, want 1", s.RateLimitWaits)
	}
	out, _ := os.ReadFile(filepath.Join(e.dir, "out.jsonl"))
	if !strings.Contains(string(out), `{"id":"ok","output":{"echo":"ok","q":"ok"}}`) {
		t.Errorf("output %s lacks the ok item's response", out)
	}
	if strings.Contains(s.TopErrors[0].Error, "s3cret") {
		t.Error("the token leaked into an error")
	}
}

func TestRunBadJSONL(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	p := e.write("p.yaml", execPipeline("lines", "{max_attempts: 1}"))
	input := e.write("in.jsonl", "{\"id\": 1}\n{\"id\": 2\n\n{\"id\": 3}\nnot json at all\n{\"id\": 1}\n{\"mode\": \"ok\"}\n")
	s := e.summary(runner.ExitCompleted, p, "--input", input, "--success-threshold", "0.5")
	if s.Counts.Total != 6 || s.Counts.Succeeded != 3 || s.Counts.Dead != 3 || s.Input.Invalid != 3 {
		t.Fatalf("counts %+v input %+v, want 6 = 3 succeeded + 3 dead (invalid)", s.Counts, s.Input)
	}
	if s.DeadByClass[redrive.ClassInvalidInput] != 3 {
		t.Errorf("dead by class %v, want 3 invalid_input", s.DeadByClass)
	}
	var msgs []string
	for _, it := range e.items(s.RunID) {
		if it.State == redrive.StateDead {
			msgs = append(msgs, it.Reason.Error)
		}
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"invalid input: line 2:", "invalid input: line 5:", `invalid input: line 6: duplicate id "1" (first on line 1)`} {
		if !strings.Contains(all, want) {
			t.Errorf("dead reasons lack %q:\n%s", want, all)
		}
	}
	// A rerun resumes: nothing is added, nothing runs again.
	s2 := e.summary(runner.ExitCompleted, p, "--input", input, "--success-threshold", "0.5")
	if s2.RunID != s.RunID || s2.Input.Added != 0 || s2.Input.Existing != 6 || s2.Counts != s.Counts {
		t.Errorf("rerun: %+v %+v, want the same run with nothing added", s2.Input, s2.Counts)
	}
}

func TestRunBadYAML(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	input := e.write("in.jsonl", "{}\n")
	for _, c := range []struct{ yaml, want string }{
		{"name: x\nstages:\n  - name: a\n    exec: {command: sh}\n    retries: 3\n", `bad.yaml:5:5: unknown key "retries"`},
		{"name: x\nstages:\n  - name: a\n    exec: {command: sh}\n    retry: {base: 30}\n", `bad.yaml:5:19: invalid duration "30"`},
		{"name: x\nstages:\n  - name: a\n    exec: {command: sh}\n    retry:\n      jitter: 1.5\n", `bad.yaml:6:15: jitter 1.5 must be between 0 and 1`},
		{"name: x\nstages:\n  - name: a\n    exec: {command: sh}\n    retry: {backoff: cubic}\n", `bad.yaml:5:22: backoff "cubic"`},
		{"name: x\nstages:\n  - name: a\n    exec: {command: sh}\n    concurrency: many\n", `bad.yaml:5:18: cannot unmarshal`},
		{"name: x\nstages:\n  - name: a\n   exec: [\n", `bad.yaml:2: invalid YAML: did not find expected`},
		{"name: x\nstages: []\n", `bad.yaml:2:9: a pipeline needs at least one stage`},
		{"name: x\nstages:\n  - name: a\n    exec: {command: sh}\n    http: {url: x}\n", `bad.yaml:5:11: stage "a" has both exec and http`},
	} {
		p := e.write("bad.yaml", c.yaml)
		r := e.run(p, "--input", input)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: want exit 2 and %q, got %v", c.yaml, c.want, r)
		}
	}
	if r := e.run(filepath.Join(e.dir, "nope.yaml"), "--input", input); r.code != exitUsage {
		t.Errorf("missing pipeline file: %v", r)
	}
	p := e.write("ok.yaml", execPipeline("ok", "{max_attempts: 1}"))
	if r := e.run(p, "--input", filepath.Join(e.dir, "nope.jsonl")); r.code != exitUsage {
		t.Errorf("missing input file: %v", r)
	}
	if r := e.run(p); r.code != exitUsage || !strings.Contains(r.stderr, "--input") {
		t.Errorf("no --input: %v", r)
	}
	if r := e.run(p, "--input", input, "--no-such-flag"); r.code != exitUsage {
		t.Errorf("unknown flag: %v", r)
	}
}

func TestRunStatusExitCodes(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	p := e.write("p.yaml", execPipeline("status", "{max_attempts: 1}"))
	lines := func(ok, bad int) string {
		var b strings.Builder
		for i := range ok {
			fmt.Fprintf(&b, "{\"id\": \"ok%d\", \"mode\": \"ok\"}\n", i)
		}
		for i := range bad {
			fmt.Fprintf(&b, "{\"id\": \"bad%d\", \"mode\": \"final\"}\n", i)
		}
		return b.String()
	}
	for _, c := range []struct {
		name    string
		ok, bad int
		args    []string
		code    int
		status  redrive.RunStatus
	}{
		{"completed", 10, 0, nil, runner.ExitCompleted, redrive.RunCompleted},
		{"partial", 7, 3, nil, runner.ExitPartial, redrive.RunPartialSuccess},
		{"failed", 2, 8, nil, runner.ExitFailed, redrive.RunFailed},
		{"aborted", 0, 200, []string{"--failure-budget", "0.1", "--min-items", "5", "--workers", "1"}, runner.ExitAborted, redrive.RunAborted},
	} {
		input := e.write(c.name+".jsonl", lines(c.ok, c.bad))
		s := e.summary(c.code, append([]string{p, "--input", input}, c.args...)...)
		if s.Status != c.status {
			t.Errorf("%s: status %s, want %s", c.name, s.Status, c.status)
		}
		if c.status == redrive.RunAborted {
			if !s.FailureBudget.Exceeded || s.FailureBudget.Configured != 0.1 || !strings.Contains(s.Reason, "budget") {
				t.Errorf("aborted: budget %+v reason %q, want exceeded", s.FailureBudget, s.Reason)
			}
			t.Logf("aborted: %+v", s.Counts)
		}
	}
	// The text summary states the budget and the commands for the dead items.
	input := e.write("text.jsonl", lines(9, 1))
	r := e.run(p, "--input", input, "--failure-budget", "0.5", "--run-name", "text")
	for _, want := range []string{
		"items:   10 total = 9 succeeded + 1 dead + 0 canceled",
		"failure budget: 50.0% dead allowed", "not exceeded",
		"redrive dlq list --db sqlite:" + e.db + " --run ",
		"redrive dlq redrive --db sqlite:" + e.db + " --run ",
		"retry histogram",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestRunProgressNotTerminal(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	p := e.write("p.yaml", execPipeline("prog", "{max_attempts: 1}"))
	var b strings.Builder
	for i := range 8 {
		fmt.Fprintf(&b, "{\"id\": %d, \"mode\": \"slow\"}\n", i)
	}
	input := e.write("in.jsonl", b.String())
	r := e.run(p, "--input", input, "--workers", "2", "--progress-interval", "200ms")
	if r.code != 0 {
		t.Fatal(r)
	}
	re := regexp.MustCompile(`(?m)^\[prog\] \d+/8 done \(\d+%\) · \d+ succeeded · \d+ dead · \d+ retrying \(\d+ rate-limited\) · [\d.]+/s · ETA \S+$`)
	if n := len(re.FindAllString(r.stderr, -1)); n < 2 {
		t.Errorf("want at least 2 progress lines on stderr, got %d:\n%s", n, r.stderr)
	}
	if strings.Contains(r.stderr, "\r") {
		t.Error("progress redrawn with \\r although stderr is not a terminal")
	}
}

// TestRunResumeAfterKill kills the runner mid-run and runs the same command
// again: items that succeeded before the kill are not processed again,
// nothing is lost, and the counts add up to the input's lines.
func TestRunResumeAfterKill(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	ledger := filepath.Join(e.dir, "ledger")
	e.env = append(e.env, "LEDGER="+ledger)
	p := e.write("p.yaml", `name: resume
stages:
  - name: first
    exec: {command: "${STAGE_SH}"}
    retry: {max_attempts: 3, base: 10ms}  # an attempt cut by the kill counts as one
`)
	const n, workers = 120, 4
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "{\"id\": \"k%03d\", \"mode\": \"ok\"}\n", i)
	}
	input := e.write("in.jsonl", b.String())
	args := []string{"run", "--db", "sqlite:" + e.db, p, "--input", input, "--workers", fmt.Sprint(workers), "--lease", "1s"}

	cmd := exec.Command(binPath, args...)
	cmd.Env = cleanEnv(e.env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(ledger)
		if bytes.Count(b, []byte("\n")) >= n/3 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the runner made no progress")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// Commands run in their own process group and outlive the runner: wait
	// until those started before the kill have written their ledger line
	// and exited.
	waitGone(t, "LEDGER="+ledger)
	atKill := map[string]bool{} // items the killed runner started
	led, _ := os.ReadFile(ledger)
	for _, k := range strings.Fields(string(led)) {
		atKill[k] = true
	}

	// What succeeded before the kill.
	before := map[string]bool{}
	runID := int64(0)
	for id, it := range e.items(1) {
		runID = it.RunID
		if it.State == redrive.StateSucceeded {
			before[id] = true
		}
	}
	if len(before) == 0 || len(before) == n {
		t.Fatalf("%d of %d items succeeded before the kill; want some but not all", len(before), n)
	}

	s := e.summary(runner.ExitCompleted, args[3:]...)
	if s.RunID != runID || !s.Resumed || s.Counts.Total != n || s.Counts.Succeeded != n {
		t.Fatalf("rerun: run %d resumed %v counts %+v, want run %d with %d succeeded", s.RunID, s.Resumed, s.Counts, runID, n)
	}
	calls := map[string]int{}
	f, err := os.Open(ledger)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		calls[sc.Text()]++
	}
	repeated := 0
	for i := range n {
		id := fmt.Sprintf("k%03d", i)
		switch c := calls[id]; {
		case c == 0:
			t.Errorf("%s was never processed", id)
		case c > 1 && before[id]:
			t.Errorf("%s succeeded before the kill but was processed %d times", id, c)
		case c > 2 || (c > 1 && !atKill[id]):
			t.Errorf("%s was processed %d times, started by the killed runner: %v", id, c, atKill[id])
		case c > 1:
			repeated++
		}
	}
	// Only the attempts cut by the kill repeat: those running and those
	// finished whose result was not yet written.
	t.Logf("%d items succeeded before the kill, %d were repeated", len(before), repeated)
}

// waitGone waits until no live process has marker (NAME=value) in its
// environment, reading /proc.
func waitGone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		pid := processWithEnv(marker)
		if pid == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %s with %s did not exit", pid, marker)
		}
		time.Sleep(10 * time.Millisecond) // polls a condition, with a deadline
	}
}

// processWithEnv returns the ID of a live process with marker in its
// environment, or "". A zombie's environment reads empty.
func processWithEnv(marker string) string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			if string(kv) == marker {
				return e.Name()
			}
		}
	}
	return ""
}

// TestRunInterrupt sends SIGINT: the runner stops gracefully with exit 130
// and a summary, and the same command finishes the run.
func TestRunInterrupt(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	p := e.write("p.yaml", execPipeline("intr", "{max_attempts: 1}"))
	var b strings.Builder
	for i := range 30 {
		fmt.Fprintf(&b, "{\"id\": %d, \"mode\": \"slow\"}\n", i)
	}
	input := e.write("in.jsonl", b.String())
	cmd := exec.Command(binPath, "run", "--db", "sqlite:"+e.db, p, "--input", input, "--workers", "2", "--json")
	cmd.Env = cleanEnv(e.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt it once an item has succeeded (of 30 slow ones, two at a
	// time).
	deadline := time.Now().Add(60 * time.Second)
	for !anySucceeded(t, e.db) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no item succeeded\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // polls a condition, with a deadline
	}
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != runner.ExitInterrupted {
		t.Fatalf("want exit 130, got %v\n%s", err, stderr.String())
	}
	var s runner.Summary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("summary: %v\n%s", err, stdout.String())
	}
	if !s.Interrupted || s.Counts.Succeeded == 0 || s.Counts.Succeeded == 30 || s.Counts.Running != 0 {
		t.Fatalf("interrupted summary %+v", s.Counts)
	}
	s2 := e.summary(runner.ExitCompleted, p, "--input", input, "--workers", "4")
	if s2.RunID != s.RunID || s2.Counts.Succeeded != 30 {
		t.Fatalf("resumed run %d counts %+v", s2.RunID, s2.Counts)
	}
}

// TestPolicyPreviewFromExamples previews the seeds' policies shipped under
// examples/policies and checks them against the seeds' schedules.
func TestPolicyPreviewFromExamples(t *testing.T) {
	t.Parallel()
	want := map[string][]seedRow{}
	for _, s := range seedSchedules {
		want[s.name] = s.want
	}
	for _, c := range []struct{ file, stage, seed string }{
		{"adr-0010.yaml", "llm_call", "ADR-0010"},
		{"adr-003-llm.yaml", "llm_call", "ADR-003"},
		{"rust-plan.yaml", "run", "Rust plan"},
		{"documents.yaml", "chunks", "document policy"},
		{"documents.yaml", "threads", "document policy"},
	} {
		r := runCLI(t, nil, "policy", "preview", "--from", filepath.Join("..", "..", "examples", "policies", c.file), "--stage", c.stage, "--json")
		if r.code != 0 {
			t.Errorf("%s %s: %v", c.file, c.stage, r)
			continue
		}
		var rows []jsonPreviewRow
		decodeJSON(t, r, &rows)
		checkRows(t, rows, want[c.seed])
	}
	// The 3-attempt stages of the document policy stop after two delays.
	r := runCLI(t, nil, "policy", "preview", "--from", "../../examples/policies/documents.yaml", "--stage", "archives", "--json")
	var rows []jsonPreviewRow
	decodeJSON(t, r, &rows)
	checkRows(t, rows, want["document policy"][:2])
}

// anySucceeded reports whether an item of the database at path has
// succeeded; a database not created yet has none.
func anySucceeded(t *testing.T, path string) bool {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return false
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return false // still being created and migrated
	}
	defer st.Close()
	n, err := st.Count(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateSucceeded}})
	return err == nil && n > 0
}
