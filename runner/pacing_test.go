package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/examples/flakyapi/flaky"
	"github.com/redrive/redrive/runner"
	"github.com/redrive/redrive/sqlite"
)

// flakyServer serves examples/flakyapi's endpoint on a loopback port, counting the
// requests it receives by prompt.
type flakyServer struct {
	URL string

	mu     sync.Mutex
	calls  map[string]int
	bodies []string
}

func startFlaky(t *testing.T, o flaky.Options) *flakyServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := &flakyServer{URL: "http://" + ln.Addr().String(), calls: map[string]int{}}
	h := flaky.NewHandler(o)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var req flaky.Request
		_ = json.Unmarshal(body, &req)
		fs.mu.Lock()
		fs.calls[req.Prompt]++
		fs.bodies = append(fs.bodies, string(body))
		fs.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		h.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return fs
}

func (fs *flakyServer) requests() map[string]int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make(map[string]int, len(fs.calls))
	for k, v := range fs.calls {
		out[k] = v
	}
	return out
}

// runPipeline runs yaml over items JSON lines on a fresh SQLite store, which it returns
// open for the test to read.
func runPipeline(t *testing.T, yaml string, items []string) (*runner.Summary, redrive.Store) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "items.jsonl"), []byte(strings.Join(items, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := runner.LoadFile(filepath.Join(dir, "p.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db := filepath.Join(dir, "r.db")
	store, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sum, err := runner.Execute(ctx, spec, runner.Options{Input: filepath.Join(dir, "items.jsonl"), DB: "sqlite:" + db, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return sum, store
}

// TestHTTPStageHealthyServerNoItemDiesWaiting: 60 items against a healthy flakyapi (every
// fault rate 0, no limit), timeout 500ms, concurrency 12, at the defaults and with
// rate_limit: off. No item dies and every attempt the engine made reached the server:
// the stage's timeout bounds the call, never a wait for the pace. The transport's own
// flow control used to wait inside the attempt, under its timeout: 1-2 items dead at the
// defaults and 30-35 with rate_limit: off, never sent.
//
// On a busy machine a call on loopback may itself outlast 500 ms now and then; such an
// attempt reached the server (it counts one more request, and one more attempt), so the
// test holds each item's requests equal to its attempts rather than to 1, and requires
// exactly one request per item only when no attempt failed.
func TestHTTPStageHealthyServerNoItemDiesWaiting(t *testing.T) {
	const items = 60
	for _, tc := range []struct{ name, extra string }{
		{"defaults", ""},
		{"rate_limit off", "    rate_limit: off\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startFlaky(t, flaky.Options{})
			yaml := fmt.Sprintf(`name: healthy
workers: 12
stages:
  - name: complete
    concurrency: 12
    timeout: 500ms
    http:
      method: POST
      url: "%s/v1/complete"
%s`, srv.URL, tc.extra)
			var in []string
			for i := range items {
				in = append(in, fmt.Sprintf(`{"id":"i%d","prompt":"i%d"}`, i, i))
			}
			sum, store := runPipeline(t, yaml, in)
			got := srv.requests()
			ctx := context.Background()
			all, err := store.ListItems(ctx, redrive.ItemFilter{RunID: sum.RunID, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			failed, unsent := 0, 0
			for _, it := range all {
				as, err := store.Attempts(ctx, it.ID)
				if err != nil {
					t.Fatal(err)
				}
				// The item's key ends in its id, which is its prompt (the payload is
				// the stage's output by now).
				prompt := it.Key[strings.LastIndex(it.Key, "/")+1:]
				for _, a := range as {
					if a.Outcome != redrive.OutcomeSucceeded {
						failed++
						t.Logf("item %s attempt %d: %s %s", it.Key, a.Number, a.Outcome, a.Error)
					}
				}
				if got[prompt] != len(as) {
					unsent += len(as) - got[prompt]
					t.Errorf("item %s: %d attempts, %d requests received", it.Key, len(as), got[prompt])
				}
			}
			if sum.Counts.Succeeded != items || sum.Counts.Dead != 0 {
				t.Errorf("counts %+v, want %d succeeded, 0 dead", sum.Counts, items)
			}
			if unsent > 0 {
				t.Errorf("%d attempts never reached the server: they waited out their timeout before the call", unsent)
			}
			if failed == 0 && len(got) != items {
				t.Errorf("server saw %d prompts, want %d", len(got), items)
			}
			// The stage's flow waits before the attempt, and says so: at the defaults slow
			// start ramps from 10 calls/s (the transport told the stage it calls over the
			// network), so 60 calls wait; with rate_limit: off nothing paces them.
			if tc.extra == "" {
				if len(sum.Paced) != 1 || sum.Paced[0].Dependency != "complete" || sum.Paced[0].Calls != int64(len(got)) || sum.Paced[0].Waited <= 0 {
					t.Errorf("paced %+v, want the stage's %d calls and their waits", sum.Paced, len(got))
				}
			} else if sum.Paced != nil {
				t.Errorf("paced %+v with rate_limit: off", sum.Paced)
			}
			t.Logf("%d items, %d failed attempts, %d prompts at the server; paced %+v", len(all), failed, len(got), sum.Paced)
		})
	}
}

// TestSummaryCountsPaceWaits: a stage paced at 10 calls/s reports its calls' waits before
// they started, in the summary's text and JSON. The transport's waits inside the call
// were counted nowhere: the summary said "waiting on the limit: 0.0s" while calls waited.
func TestSummaryCountsPaceWaits(t *testing.T) {
	const items = 20
	srv := startFlaky(t, flaky.Options{})
	yaml := fmt.Sprintf(`name: paced
workers: 8
stages:
  - name: complete
    rate_limit: 10/s
    http:
      method: POST
      url: "%s/v1/complete"
`, srv.URL)
	var in []string
	for i := range items {
		in = append(in, fmt.Sprintf(`{"id":"i%d","prompt":"i%d"}`, i, i))
	}
	sum, store := runPipeline(t, yaml, in)
	if sum.Counts.Succeeded != items {
		t.Fatalf("counts %+v", sum.Counts)
	}
	// Calls spaced 100 ms apart: the items claimed together at the start (the pace
	// claims half a second ahead, 6 items) wait 0, 0.1, ... 0.5 s for their turns.
	if len(sum.Paced) != 1 || sum.Paced[0].Dependency != "complete" || sum.Paced[0].Calls != items || sum.Paced[0].Waited < 0.3 {
		t.Fatalf("paced %+v, want %d calls of stage complete that waited 0.3 s or more in all", sum.Paced, items)
	}
	// The store keeps the same waits for the run, for `redrive runs show` and
	// the API after the process is gone.
	kept, err := store.(redrive.PaceRecorder).PaceWaits(context.Background(), sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 || kept[0].Stage != "complete" || kept[0].Calls != items ||
		math.Abs(kept[0].Waited.Seconds()-float64(sum.Paced[0].Waited)) > 0.001 {
		t.Fatalf("store kept pace waits %+v; the summary said %+v", kept, sum.Paced)
	}
	var b strings.Builder
	if err := sum.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("waiting on the pace: complete: %d calls waited %.1fs before starting", items, float64(sum.Paced[0].Waited))
	if !strings.Contains(b.String(), want) {
		t.Fatalf("summary:\n%s\nwant a line starting %q", b.String(), want)
	}
	js, err := json.Marshal(sum)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"paced":[{"dependency":"complete","calls":20,"waited_seconds":`) {
		t.Fatalf("JSON summary without the pace's waits: %s", js)
	}
	t.Logf("%s", b.String())
}
