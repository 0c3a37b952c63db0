package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/sqlite"
)

// startServe starts `redrive serve` with args and env, and kills it when
// the test ends unless it already exited.
func startServe(t *testing.T, env []string, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd, log, _ := startServeAt(t, env, args...)
	return cmd, log
}

// startServeAt is startServe that also returns the server's base URL.
func startServeAt(t *testing.T, env []string, args ...string) (*exec.Cmd, *syncBuffer, string) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(binPath, append(args, "--addr", addr)...)
	cmd.Env = env
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	waitFor(t, "serve's workers", 60*time.Second, func() bool {
		return strings.Contains(stderr.String(), "running workers") && strings.Contains(stderr.String(), "listening")
	}, stderr.String)
	return cmd, &stderr, "http://" + addr
}

// TestOutboxSurvivesSIGKILL kills a serve process with SIGKILL while the
// webhook receiver holds its requests: the dead items' state changes are
// committed and their notifications claimed, but no delivery is recorded.
// A new process delivers every one of them later, with the same delivery
// IDs.
func TestOutboxSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "stage.sh"), []byte("#!/bin/sh\ncat >/dev/null\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hooked.yaml"), []byte(fmt.Sprintf(hookedPipeline, "v1")), 0o644); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		hold    = true
		release = make(chan struct{})
		seen    = map[string]int{} // delivery ID: requests
		items   = map[int64]string{}
	)
	secret := []byte("crash-secret")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if err := redrive.VerifySignature(secret, r.Header.Get(redrive.HeaderSignature), raw, time.Now(), 0); err != nil {
			t.Errorf("signature: %v", err)
		}
		var b redrive.WebhookBody
		json.Unmarshal(raw, &b)
		mu.Lock()
		seen[b.ID]++
		if b.Item != nil {
			items[b.Item.ID] = b.ID
		}
		h := hold
		mu.Unlock()
		if h {
			<-release // the sender is killed meanwhile
			return
		}
	}))
	defer srv.Close()
	defer func() {
		mu.Lock()
		if hold {
			hold = false
			close(release)
		}
		mu.Unlock()
	}()

	db := filepath.Join(t.TempDir(), "redrive.db")
	env := cleanEnv("HOOK_URL="+srv.URL, "HOOK_SECRET="+string(secret))
	args := []string{"--db", "sqlite:" + db, "serve", "--migrate", "--pipelines", dir, "--lease", "2s"}
	first, firstLog := startServe(t, env, args...)

	ctx := context.Background()
	s, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run, _, err := s.CreateRun(ctx, "hooked", redrive.RunOptions{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	in := make([]redrive.NewItem, n)
	for i := range in {
		in[i] = redrive.NewItem{Key: fmt.Sprint("k", i), Payload: []byte(`{}`)}
	}
	if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "hooked", Stage: "work", Items: in, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the items to die and a delivery to start", 60*time.Second, func() bool {
		c, err := s.Count(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}})
		mu.Lock()
		defer mu.Unlock()
		return err == nil && c == n && len(seen) > 0
	}, firstLog.String)
	if err := first.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	first.Process.Wait()
	mu.Lock()
	inFlight := map[string]bool{}
	for id := range seen {
		inFlight[id] = true
	}
	hold = false
	close(release)
	mu.Unlock()
	ns, err := s.ListNotifications(ctx, redrive.NotificationFilter{Statuses: []redrive.NotificationStatus{redrive.NotificationDelivered}})
	if err != nil || len(ns) != 0 {
		t.Fatalf("delivered before the kill: %v, %v", ns, err)
	}

	_, secondLog := startServe(t, env, args...)
	waitFor(t, "every notification delivered", 60*time.Second, func() bool {
		ns, err := s.ListNotifications(ctx, redrive.NotificationFilter{Statuses: []redrive.NotificationStatus{redrive.NotificationDelivered}})
		return err == nil && len(ns) == n+1 // n item.dead and run.finished
	}, secondLog.String)
	mu.Lock()
	defer mu.Unlock()
	if len(items) != n {
		t.Errorf("deliveries name %d items, want %d", len(items), n)
	}
	for id := range inFlight {
		if seen[id] < 2 {
			t.Errorf("delivery %s was in flight at the kill and was not sent again (%d requests)", id, seen[id])
		}
	}
}

// TestTwoWorkersShareAndSurviveSIGKILL is issue 11's proof on PostgreSQL:
// two serve processes work 5,000 items of one pipeline, one is killed with
// SIGKILL mid-run, and the other finishes: every item succeeded or dead
// with a reason, each dead item announced by exactly one delivery ID
// (requests may repeat: the receiver fails a fifth of them), every
// signature verified, counts adding up. The items are submitted over HTTP
// in batches of 500, each sent twice with its Idempotency-Key (a client
// retrying a submit whose answer it lost): the second adds nothing.
func TestTwoWorkersShareAndSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("5,000 items and a crash")
	}
	url, schema := pgtest.NewSchema(t)
	s := pgtest.OpenStoreAt(t, url, schema)
	ctx := context.Background()

	// The stage's dependency: n%10 == 0 is refused for good (400), n%7 == 0
	// fails once with 503.
	var (
		bmu   sync.Mutex
		tried = map[int]int{}
	)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ N int }
		json.NewDecoder(r.Body).Decode(&in)
		bmu.Lock()
		tried[in.N]++
		k := tried[in.N]
		bmu.Unlock()
		switch {
		case in.N%10 == 0:
			http.Error(w, "refused", http.StatusBadRequest)
		case in.N%7 == 0 && k == 1:
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			w.Write([]byte(`{"ok":true}`))
		}
	}))
	defer backend.Close()

	secret := []byte("proof-secret")
	var (
		hmu      sync.Mutex
		rng      = rand.New(rand.NewPCG(11, 5000))
		requests int
		bad      int
		byID     = map[string]redrive.WebhookBody{}
	)
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		hmu.Lock()
		defer hmu.Unlock()
		requests++
		if err := redrive.VerifySignature(secret, r.Header.Get(redrive.HeaderSignature), raw, time.Now(), 0); err != nil {
			bad++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if rng.IntN(5) == 0 {
			http.Error(w, "flaky", http.StatusInternalServerError)
			return
		}
		var b redrive.WebhookBody
		if json.Unmarshal(raw, &b) != nil || b.ID != r.Header.Get(redrive.HeaderDelivery) {
			bad++
		}
		byID[b.ID] = b
	}))
	defer hooks.Close()

	dir := t.TempDir()
	spec := `name: proof
workers: 16
stages:
  - name: call
    http:
      url: ${BACKEND}/work
    retry: {max_attempts: 5, base: 50ms, max_delay: 200ms}
webhook:
  url: ${HOOK_URL}
  secret: ${HOOK_SECRET}
  events: [item.dead, run.finished]
  retry: {max_attempts: 30, base: 50ms, max_delay: 500ms}
`
	if err := os.WriteFile(filepath.Join(dir, "proof.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	const token = "proof-submit-token"
	env := cleanEnv("BACKEND="+backend.URL, "HOOK_URL="+hooks.URL, "HOOK_SECRET="+string(secret), envAPIToken+"="+token)
	args := []string{"--db", url, "--pg-schema", schema, "serve", "--pipelines", filepath.Join(dir, "*.yaml"), "--lease", "3s"}
	victim, victimLog := startServe(t, env, args...)
	_, survivorLog, base := startServeAt(t, env, args...)
	logs := func() string { return "victim:\n" + victimLog.String() + "\nsurvivor:\n" + survivorLog.String() }

	const total = 5000
	var runID int64
	hc := &http.Client{Timeout: 60 * time.Second}
	for lo := 0; lo < total; lo += 500 {
		type item struct {
			Key   string          `json:"key"`
			Input json.RawMessage `json:"input"`
		}
		batch := make([]item, 500)
		for i := range batch {
			batch[i] = item{Key: fmt.Sprint("n", lo+i), Input: fmt.Appendf(nil, `{"n":%d}`, lo+i)}
		}
		body, _ := json.Marshal(map[string]any{"run": "proof", "items": batch})
		for try := range 2 {
			req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/pipelines/proof/items", strings.NewReader(string(body)))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprint("proof-batch-", lo))
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			var out struct {
				Run             struct{ ID int64 }
				Added, Existing int
			}
			err = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			if err != nil || resp.StatusCode >= 300 {
				t.Fatalf("submit batch %d: %s, %v", lo, resp.Status, err)
			}
			if want := [2]int{500, 0}; try == 1 {
				want = [2]int{0, 500}
				if [2]int{out.Added, out.Existing} != want {
					t.Fatalf("retried submit of batch %d: added %d, existing %d; want nothing added", lo, out.Added, out.Existing)
				}
			} else if [2]int{out.Added, out.Existing} != want {
				t.Fatalf("submit of batch %d: added %d, existing %d", lo, out.Added, out.Existing)
			}
			runID = out.Run.ID
		}
	}
	run, err := s.GetRun(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	finished := func() int {
		r, err := s.GetRun(ctx, run.ID)
		if err != nil {
			return 0
		}
		return r.Counts.Succeeded + r.Counts.Dead
	}
	// The kill waits for a fifth of the work, however long a loaded machine
	// takes to do it: the deadline only bounds a hung run, as the one below.
	waitFor(t, "a fifth of the items", 600*time.Second, func() bool { return finished() >= total/5 }, logs)
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := finished()
	// 4,000 items on one process take 40 s on an idle 2-core machine and
	// over 300 s while the rest of the suite runs beside it.
	waitFor(t, "the run to finish", 600*time.Second, func() bool {
		r, err := s.GetRun(ctx, run.ID)
		return err == nil && r.Status != redrive.RunRunning
	}, logs)
	if killedAt >= total {
		t.Errorf("the kill came after the work (%d of %d finished): it proves nothing", killedAt, total)
	}

	r, err := s.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Counts
	if c.Total != total || c.Succeeded+c.Dead != total || c.Pending+c.Running+c.Canceled != 0 {
		t.Fatalf("counts = %+v", c)
	}
	dead, err := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateDead}, Limit: total})
	if err != nil {
		t.Fatal(err)
	}
	deadIDs := map[int64]bool{}
	for _, it := range dead {
		if it.Reason == nil || it.Reason.Class == "" || it.Reason.Error == "" {
			t.Errorf("dead item %d has no reason: %+v", it.ID, it.Reason)
		}
		deadIDs[it.ID] = true
	}
	if len(dead) < total/10 {
		t.Errorf("%d dead items, want at least the %d refused ones", len(dead), total/10)
	}

	// Every notification delivered: one per dead item and the run's.
	waitFor(t, "every notification delivered", 120*time.Second, func() bool {
		ns, err := s.ListNotifications(ctx, redrive.NotificationFilter{Statuses: []redrive.NotificationStatus{redrive.NotificationPending, redrive.NotificationDead}})
		return err == nil && len(ns) == 0
	}, logs)
	hmu.Lock()
	defer hmu.Unlock()
	perItem := map[int64][]string{}
	runs := 0
	for id, b := range byID {
		switch {
		case b.Event == redrive.EventRunFinished:
			runs++
		case b.Item != nil && b.Event == redrive.EventItemDead:
			perItem[b.Item.ID] = append(perItem[b.Item.ID], id)
		default:
			t.Errorf("unexpected delivery %+v", b)
		}
	}
	for id := range deadIDs {
		if len(perItem[id]) != 1 {
			t.Errorf("dead item %d: %d delivery IDs, want exactly 1", id, len(perItem[id]))
		}
	}
	if len(perItem) != len(deadIDs) || runs != 1 || bad != 0 {
		t.Errorf("deliveries: %d items (want %d), %d run.finished (want 1), %d failed verification", len(perItem), len(deadIDs), runs, bad)
	}
	t.Logf("killed one of two workers at %d/%d finished; %d succeeded, %d dead; %d webhook requests for %d delivery IDs",
		killedAt, total, c.Succeeded, c.Dead, requests, len(byID))
}
