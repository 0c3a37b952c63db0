package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
)

// workToken grants the scopes the external workers' tests use.
const workToken = "work-token-5f2e81c0b7d4"

// servedExternal starts `redrive serve` on a fresh SQLite database with the
// pipeline file content and a token with the work, submit and read scopes,
// and returns its URL, the database path and its log.
func servedExternal(t *testing.T, pipeline string, extra ...string) (url, db string, log *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "redrive.db")
	file := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(file, []byte(pipeline), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("worker work,submit,read "+workToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--db", "sqlite:" + db, "serve", "--migrate", "--pipeline", file, "--token-file", tokens}, extra...)
	_, log, url = startServeAt(t, cleanEnv(), args...)
	return url, db, log
}

// api makes a request with the work token and decodes the JSON answer.
func api(t *testing.T, method, url string, body any, out any) int {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+workToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: status %d, body: %v", method, url, resp.StatusCode, err)
		}
	}
	return resp.StatusCode
}

// submitItems submits inputs to a pipeline as one run and returns its ID.
func submitItems(t *testing.T, url, pipeline string, inputs []map[string]any) int64 {
	t.Helper()
	items := make([]map[string]any, len(inputs))
	for i, in := range inputs {
		items[i] = map[string]any{"input": in}
	}
	var resp struct {
		Run redrive.Run `json:"run"`
	}
	if code := api(t, "POST", url+"/api/v1/pipelines/"+pipeline+"/items", map[string]any{"items": items}, &resp); code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	return resp.Run.ID
}

// waitRunDone polls the API until run id has finished, and returns it.
func waitRunDone(t *testing.T, url string, id int64, d time.Duration, log func() string) redrive.Run {
	t.Helper()
	var run redrive.Run
	waitFor(t, fmt.Sprintf("run %d to finish", id), d, func() bool {
		var detail struct {
			Run redrive.Run `json:"run"`
		}
		api(t, "GET", fmt.Sprintf("%s/api/v1/runs/%d", url, id), nil, &detail)
		run = detail.Run
		return run.Status != redrive.RunRunning && run.Counts.Pending+run.Counts.Running == 0 && run.Counts.Total > 0
	}, func() string { return fmt.Sprintf("run %+v\n%s", run, log()) })
	if !run.Counts.AddsUp() {
		t.Fatalf("counts do not add up: %+v", run.Counts)
	}
	return run
}

// interpreter returns the program that runs the worker of lang, skipping
// the test where it is not installed (failing in CI).
func interpreter(t *testing.T, lang string) string {
	t.Helper()
	names := map[string][]string{"python": {"/usr/bin/python3", "python3"}, "node": {"node"}, "ruby": {"ruby"}}[lang]
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is required in CI", names[len(names)-1])
	}
	t.Skipf("%s not installed", names[len(names)-1])
	return ""
}

// worker is a running test worker process (testdata/ext_worker.*).
type worker struct {
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan error
}

// startWorker starts testdata/ext_worker.py or .mjs against url.
func startWorker(t *testing.T, lang, url string, args ...string) *worker {
	t.Helper()
	script := map[string]string{"python": "testdata/ext_worker.py", "node": "testdata/ext_worker.mjs", "ruby": "testdata/ext_worker.rb"}[lang]
	cmd := exec.Command(interpreter(t, lang), append([]string{script}, args...)...)
	cmd.Env = append(cleanEnv(), "REDRIVE_URL="+url, "REDRIVE_TOKEN="+workToken)
	w := &worker{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = w.stdout, w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-w.done
		w.done <- nil
		if t.Failed() {
			t.Logf("%s worker stderr:\n%s", lang, w.stderr.String())
		}
	})
	return w
}

// stop sends SIGTERM and returns the counts the worker printed.
func (w *worker) stop(t *testing.T) map[string]int {
	t.Helper()
	w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.done:
		w.done <- err
		if err != nil {
			t.Fatalf("worker after SIGTERM: %v\n%s", err, w.stderr.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("worker did not stop after SIGTERM\n%s", w.stderr.String())
	}
	var counts map[string]int
	if err := json.Unmarshal([]byte(strings.TrimSpace(w.stdout.String())), &counts); err != nil {
		t.Fatalf("worker output %q: %v", w.stdout.String(), err)
	}
	return counts
}

// itemsOf returns the items of a run with their attempts, from the
// database.
func itemsOf(t *testing.T, db string, run int64) ([]redrive.Item, map[int64][]redrive.Attempt) {
	t.Helper()
	s, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	its, err := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	atts := map[int64][]redrive.Attempt{}
	for _, it := range its {
		if atts[it.ID], err = s.Attempts(context.Background(), it.ID); err != nil {
			t.Fatal(err)
		}
	}
	return its, atts
}

const mixedPipeline = `name: mixed
stages:
  - name: prep
    exec: {command: cat}
  - name: work
    external: true
    retry: {max_attempts: 3, base: 50ms, max_delay: 100ms}
`

// TestExternalWorkersRunToCompletion runs the Python, Node and Ruby worker
// libraries against real serve processes: a pipeline whose first stage is an
// exec stage and whose second is external runs to completion; final
// failures are dead with their reason, retryable ones retried, rate-limited
// ones wait without using up an attempt; SIGTERM stops the worker cleanly
// and removes it from the workers view.
func TestExternalWorkersRunToCompletion(t *testing.T) {
	t.Parallel()
	for _, lang := range []string{"python", "node", "ruby"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			interpreter(t, lang)
			url, db, log := servedExternal(t, mixedPipeline)
			w := startWorker(t, lang, url, "mixed", "work", "8")
			var inputs []map[string]any
			for i := range 30 {
				inputs = append(inputs, map[string]any{"n": i})
			}
			for i := range 3 {
				inputs = append(inputs, map[string]any{"n": 100 + i, "final": true}, map[string]any{"n": 200 + i, "flaky": 1})
			}
			inputs = append(inputs, map[string]any{"n": 300, "rate": 0.5}, map[string]any{"n": 301, "rate": 0.5})
			run := submitItems(t, url, "mixed", inputs)
			r := waitRunDone(t, url, run, 60*time.Second, log.String)
			if r.Counts.Succeeded != len(inputs)-3 || r.Counts.Dead != 3 {
				t.Fatalf("counts = %+v, want %d succeeded and 3 dead", r.Counts, len(inputs)-3)
			}
			its, atts := itemsOf(t, db, run)
			for _, it := range its {
				var in, out map[string]any
				json.Unmarshal(it.Input, &in)
				json.Unmarshal(it.Payload, &out)
				work := []redrive.Attempt{}
				for _, a := range atts[it.ID] {
					if a.Stage == "work" {
						work = append(work, a)
					}
				}
				switch {
				case in["final"] == true:
					if it.State != redrive.StateDead || it.Reason == nil || it.Reason.Class != "final" || it.Reason.Stage != "work" ||
						it.Reason.Error != "refused: the input asks to die" || len(work) != 1 {
						t.Errorf("final item %d: %s %+v, %d attempts", it.ID, it.State, it.Reason, len(work))
					}
				case in["flaky"] != nil:
					if it.State != redrive.StateSucceeded || out["attempt"] != 2.0 || len(work) != 2 || work[0].Class != "retryable" ||
						!strings.Contains(work[0].Error, "connection reset") {
						t.Errorf("flaky item %d: %s %v, attempts %+v", it.ID, it.State, out, work)
					}
				case in["rate"] != nil:
					if it.State != redrive.StateSucceeded || out["attempt"] != 1.0 || len(work) != 2 || work[0].Outcome != redrive.OutcomeRateLimited {
						t.Errorf("rate-limited item %d: %s %v, attempts %+v", it.ID, it.State, out, work)
					}
				default:
					if it.State != redrive.StateSucceeded || out["by"] != lang || out["n"] != in["n"] {
						t.Errorf("item %d: %s, output %v", it.ID, it.State, out)
					}
				}
			}
			var views struct {
				Data []struct {
					Owner string `json:"owner"`
					Live  bool   `json:"live"`
				} `json:"data"`
			}
			api(t, "GET", url+"/api/v1/workers", nil, &views)
			seen := false
			for _, v := range views.Data {
				seen = seen || strings.HasPrefix(v.Owner, lang+":") && v.Live
			}
			if !seen {
				t.Errorf("workers view %+v: want the live %s worker", views.Data, lang)
			}
			counts := w.stop(t)
			if counts["completed"] != len(inputs)-3 || counts["failed"] != 3+3+2 || counts["refused"] != 0 {
				t.Errorf("worker counts %v", counts)
			}
			views.Data = nil
			api(t, "GET", url+"/api/v1/workers", nil, &views)
			for _, v := range views.Data {
				if strings.HasPrefix(v.Owner, lang+":") {
					t.Errorf("the stopped worker is still listed: %+v", v)
				}
			}
		})
	}
}

// TestExternalWorkerSIGKILL kills a Python worker with SIGKILL while it
// runs four slow items: their leases expire, the rescuer charges each a
// lost attempt, and a second worker finishes every item. Nothing is lost
// and the counts add up; the dead worker's items appear in the workers
// view while it holds them.
func TestExternalWorkerSIGKILL(t *testing.T) {
	t.Parallel()
	interpreter(t, "python")
	url, db, log := servedExternal(t, "name: slow\nstages:\n  - name: work\n    external: true\n    retry: {max_attempts: 3, base: 50ms}\n")
	var inputs []map[string]any
	for i := range 12 {
		inputs = append(inputs, map[string]any{"n": i, "sleep": 1.5})
	}
	run := submitItems(t, url, "slow", inputs)
	first := startWorker(t, "python", url, "slow", "work", "4", "2")
	var views struct {
		Data []struct {
			Owner  string `json:"owner"`
			Leased int    `json:"leased"`
		} `json:"data"`
	}
	waitFor(t, "the first worker to hold 4 items", 30*time.Second, func() bool {
		views.Data = nil
		api(t, "GET", url+"/api/v1/workers", nil, &views)
		for _, v := range views.Data {
			if strings.HasPrefix(v.Owner, "python:") && v.Leased == 4 {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("%+v\n%s", views, log.String()) })
	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	first.done <- nil
	startWorker(t, "python", url, "slow", "work", "8", "2")
	r := waitRunDone(t, url, run, 90*time.Second, log.String)
	if r.Counts.Succeeded != 12 || r.Counts.Total != 12 {
		t.Fatalf("counts = %+v: want all 12 succeeded", r.Counts)
	}
	its, atts := itemsOf(t, db, run)
	lost := 0
	for _, it := range its {
		for _, a := range atts[it.ID] {
			if a.Outcome == redrive.OutcomeLost {
				lost++
			}
		}
	}
	// The four running when the worker died, and none of those that came
	// after: the first worker had leased only what it started.
	if lost != 4 {
		t.Errorf("%d lost attempts, want the 4 the killed worker was running", lost)
	}
}

// leaseOne leases up to max items of stage as worker, waiting up to wait
// seconds.
func leaseOne(t *testing.T, url, pipeline, stage, worker string, max int, wait, lease float64) []map[string]any {
	t.Helper()
	var resp struct {
		Leases []map[string]any `json:"leases"`
	}
	if code := api(t, "POST", url+"/api/v1/leases", map[string]any{"pipeline": pipeline, "stage": stage, "worker": worker,
		"max": max, "wait": wait, "lease": lease}, &resp); code != http.StatusOK {
		t.Fatalf("lease: %d", code)
	}
	return resp.Leases
}

type settleAnswer struct {
	Results []struct {
		ID      int64  `json:"id"`
		Applied bool   `json:"applied"`
		Outcome string `json:"outcome"`
		State   string `json:"state"`
		Error   string `json:"error"`
	} `json:"results"`
	Error string `json:"error"`
}

// TestExternalFencingOverHTTP shows the protocol's fencing against a real
// server: a lease that expires while its slow worker still runs is taken
// over; the slow worker's late completion and heartbeat answer 409 and
// change nothing; the new lease's completion applies, and completing it a
// second time answers 409 and changes nothing either.
func TestExternalFencingOverHTTP(t *testing.T) {
	t.Parallel()
	url, db, log := servedExternal(t, "name: fenced\nstages:\n  - name: work\n    external: true\n    retry: {max_attempts: 3, base: 50ms}\n")
	run := submitItems(t, url, "fenced", []map[string]any{{"n": 1}})
	slow := leaseOne(t, url, "fenced", "work", "slow", 1, 10, 1)
	if len(slow) != 1 || slow[0]["attempt"] != 1.0 {
		t.Fatalf("first lease %v", slow)
	}
	var fast []map[string]any
	waitFor(t, "the expired lease to be taken over", 30*time.Second, func() bool {
		fast = leaseOne(t, url, "fenced", "work", "fast", 1, 1, 30)
		return len(fast) == 1
	}, log.String)
	if fast[0]["id"] != slow[0]["id"] || fast[0]["token"] == slow[0]["token"] || fast[0]["attempt"] != 2.0 {
		t.Fatalf("taken over as %v after %v: want the same item, a new token, attempt 2", fast[0], slow[0])
	}
	ref := func(l map[string]any) map[string]any { return map[string]any{"id": l["id"], "token": l["token"]} }
	var a settleAnswer
	if code := api(t, "POST", url+"/api/v1/leases/complete", map[string]any{"worker": "slow",
		"results": []any{map[string]any{"id": slow[0]["id"], "token": slow[0]["token"], "output": "late"}}}, &a); code != http.StatusConflict ||
		a.Results[0].Applied || a.Error == "" {
		t.Fatalf("late completion: %d %+v, want 409 not applied", code, a)
	}
	a = settleAnswer{}
	if code := api(t, "POST", url+"/api/v1/leases/heartbeat", map[string]any{"worker": "slow", "leases": []any{ref(slow[0])}}, &a); code != http.StatusConflict {
		t.Fatalf("late heartbeat: %d %+v, want 409", code, a)
	}
	for i, want := range []int{http.StatusOK, http.StatusConflict} {
		a = settleAnswer{}
		code := api(t, "POST", url+"/api/v1/leases/complete", map[string]any{"worker": "fast",
			"results": []any{map[string]any{"id": fast[0]["id"], "token": fast[0]["token"], "output": fmt.Sprintf("done-%d", i)}}}, &a)
		if code != want || a.Results[0].Applied != (want == http.StatusOK) {
			t.Fatalf("completion %d of the current lease: %d %+v, want %d", i+1, code, a, want)
		}
	}
	r := waitRunDone(t, url, run, 30*time.Second, log.String)
	its, atts := itemsOf(t, db, run)
	var outcomes []string
	for _, at := range atts[its[0].ID] {
		outcomes = append(outcomes, string(at.Outcome))
	}
	if r.Counts.Succeeded != 1 || string(its[0].Payload) != `"done-0"` || !slices.Equal(outcomes, []string{"lost", "succeeded"}) {
		t.Errorf("item %s with attempts %v (run %+v): want the first completion of the current lease, after one lost attempt", its[0].Payload, outcomes, r.Counts)
	}
}

// TestExternalFailuresOverHTTP reports failures over the protocol: a
// rate-limited failure with retry_after closes the stage for that long (no
// item of the stage is handed out before), and a final failure is dead
// with its reason at once.
func TestExternalFailuresOverHTTP(t *testing.T) {
	t.Parallel()
	url, _, log := servedExternal(t, "name: failing\nstages:\n  - name: work\n    external: true\n    retry: {max_attempts: 5, base: 50ms}\n")
	run := submitItems(t, url, "failing", []map[string]any{{"n": 1}, {"n": 2}, {"n": 3}})
	ls := leaseOne(t, url, "failing", "work", "w", 1, 10, 30)
	const after = 1.5
	begin := time.Now()
	var a settleAnswer
	if code := api(t, "POST", url+"/api/v1/leases/fail", map[string]any{"worker": "w", "failures": []any{map[string]any{
		"id": ls[0]["id"], "token": ls[0]["token"], "class": "rate_limited", "error": "429 quota", "retry_after": after}}}, &a); code != http.StatusOK ||
		a.Results[0].Outcome != "rate_limited" {
		t.Fatalf("rate-limited failure: %d %+v", code, a)
	}
	next := leaseOne(t, url, "failing", "work", "w", 3, 10, 30)
	if waited := time.Since(begin); len(next) == 0 || waited < time.Duration(after*float64(time.Second)) {
		t.Fatalf("%d items handed out %v after a Retry-After of %vs: want none before it", len(next), waited, after)
	}
	failures := []any{}
	for _, l := range next {
		failures = append(failures, map[string]any{"id": l["id"], "token": l["token"], "class": "final", "error": "schema mismatch"})
	}
	a = settleAnswer{}
	if code := api(t, "POST", url+"/api/v1/leases/fail", map[string]any{"worker": "w", "failures": failures}, &a); code != http.StatusOK {
		t.Fatalf("final failures: %d %+v", code, a)
	}
	for _, res := range a.Results {
		if res.State != "dead" {
			t.Errorf("final failure %+v: want dead", res)
		}
		var got struct {
			Item redrive.Item `json:"item"`
		}
		api(t, "GET", fmt.Sprintf("%s/api/v1/items/%d", url, res.ID), nil, &got)
		if got.Item.Reason == nil || got.Item.Reason.Class != "final" || got.Item.Reason.Error != "schema mismatch" || got.Item.Reason.Stage != "work" {
			t.Errorf("item %d reason %+v", res.ID, got.Item.Reason)
		}
	}
	// A class the protocol does not know is refused, naming the field.
	var e struct{ Error, Field string }
	if code := api(t, "POST", url+"/api/v1/leases/fail", map[string]any{"failures": []any{map[string]any{"id": 1, "token": 1, "class": "oops"}}}, &e); code != http.StatusBadRequest ||
		e.Field != "failures[0].class" {
		t.Errorf("unknown class: %d %+v", code, e)
	}
	if len(next) == 3 {
		r := waitRunDone(t, url, run, 30*time.Second, log.String)
		if r.Counts.Dead != 3 {
			t.Errorf("run %+v", r.Counts)
		}
	}
}

// TestExternalStageRateLimit runs a Python worker with 16 threads on a
// stage limited to 10 calls a second: the stage's rate, not the worker's
// appetite, paces the items' starts.
func TestExternalStageRateLimit(t *testing.T) {
	t.Parallel()
	interpreter(t, "python")
	url, db, log := servedExternal(t, "name: paced\nstages:\n  - name: work\n    external: true\n    rate_limit: 10/s\n")
	const n, rate = 30, 10
	var inputs []map[string]any
	for i := range n {
		inputs = append(inputs, map[string]any{"n": i})
	}
	run := submitItems(t, url, "paced", inputs)
	startWorker(t, "python", url, "paced", "work", "16")
	waitRunDone(t, url, run, 60*time.Second, log.String)
	_, atts := itemsOf(t, db, run)
	var starts []time.Time
	for _, as := range atts {
		for _, a := range as {
			starts = append(starts, a.StartedAt)
		}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	// n starts at 10/s with a burst of 1 span at least (n-1)/10 s; any
	// window of one second holds at most rate+1 of them.
	if span := starts[len(starts)-1].Sub(starts[0]); len(starts) != n || span < time.Duration(float64(n-2)/rate*float64(time.Second)) {
		t.Fatalf("%d starts over %v: want %d over at least %v", len(starts), span, n, time.Duration(float64(n-2)/rate*float64(time.Second)))
	}
	for i := range starts {
		j := i
		for j < len(starts) && starts[j].Sub(starts[i]) < time.Second {
			j++
		}
		if j-i > rate+1 {
			t.Fatalf("%d starts within a second from %v: want at most %d", j-i, starts[i], rate+1)
		}
	}
}
