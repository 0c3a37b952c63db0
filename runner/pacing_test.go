package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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

	mu    sync.Mutex
	calls map[string]int
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
			t.Logf("%d items, %d failed attempts, %d prompts at the server", len(all), failed, len(got))
		})
	}
}
