package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
)

// hookSink is a webhook receiver on loopback that keeps the verified
// deliveries by delivery ID.
type hookSink struct {
	t      *testing.T
	secret []byte

	mu   sync.Mutex
	byID map[string]redrive.WebhookBody
	n    int
	bad  int
}

func (h *hookSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	if err := redrive.VerifySignature(h.secret, r.Header.Get(redrive.HeaderSignature), raw, time.Now(), 0); err != nil {
		h.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var b redrive.WebhookBody
	if err := json.Unmarshal(raw, &b); err != nil || b.ID != r.Header.Get(redrive.HeaderDelivery) {
		h.bad++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.byID[b.ID] = b
}

func (h *hookSink) snapshot() (byID map[string]redrive.WebhookBody, requests, bad int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	byID = make(map[string]redrive.WebhookBody, len(h.byID))
	for k, v := range h.byID {
		byID[k] = v
	}
	return byID, h.n, h.bad
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool, log func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const hookedPipeline = `name: hooked
stages:
  - name: work
    exec:
      command: ./stage.sh
      args: [%s]
    retry: {max_attempts: 1}
webhook:
  url: ${HOOK_URL}
  secret: ${HOOK_SECRET}
`

// TestServePipelinesWebhookAndReload runs serve --pipelines on a directory:
// its workers work items enqueued by another process, a dead item's
// notification reaches the webhook signed, and SIGHUP reloads a changed
// stage, whose new configuration the next items run with.
func TestServePipelinesWebhookAndReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := "#!/bin/sh\nin=$(cat)\ncase \"$in\" in *die*) echo 'refused' >&2; exit 1;; esac\necho \"{\\\"v\\\":\\\"$1\\\"}\"\n"
	if err := os.WriteFile(filepath.Join(dir, "stage.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "hooked.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(hookedPipeline, "v1")), 0o644); err != nil {
		t.Fatal(err)
	}
	sink := &hookSink{t: t, secret: []byte("hook-secret-1"), byID: map[string]redrive.WebhookBody{}}
	srv := httptest.NewServer(sink)
	defer srv.Close()

	db := filepath.Join(t.TempDir(), "redrive.db")
	// A directory without pipeline files is a usage error.
	r := runCLI(t, cleanEnv(), "--db", "sqlite:"+db, "serve", "--migrate", "--addr", "127.0.0.1:0", "--pipelines", t.TempDir())
	if r.code != exitUsage || !strings.Contains(r.stderr, "no *.yaml or *.yml file") {
		t.Fatalf("empty directory: %v", r)
	}

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(binPath, "--db", "sqlite:"+db, "serve", "--migrate", "--addr", addr,
		"--pipelines", dir)
	cmd.Env = cleanEnv("HOOK_URL="+srv.URL+"/hook", "HOOK_SECRET="+string(sink.secret))
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("serve did not exit after SIGINT")
		}
	}()
	waitFor(t, "serve's workers", 30*time.Second, func() bool { return strings.Contains(stderr.String(), "running workers") }, stderr.String)
	if strings.Contains(stderr.String(), "hook-secret-1") {
		t.Errorf("the webhook secret is in serve's log")
	}

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
	enqueue := func(items ...redrive.NewItem) []int64 {
		t.Helper()
		res, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "hooked", Stage: "work", Items: items, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int64, len(res))
		for i, r := range res {
			ids[i] = r.ID
		}
		return ids
	}
	finished := func(id int64) func() bool {
		return func() bool {
			it, err := s.GetItem(ctx, id)
			return err == nil && (it.State == redrive.StateSucceeded || it.State == redrive.StateDead)
		}
	}
	ids := enqueue(redrive.NewItem{Key: "ok1", Payload: []byte(`{"n":1}`)}, redrive.NewItem{Key: "dies", Payload: []byte(`{"die":true}`)})
	for _, id := range ids {
		waitFor(t, "the first items", 30*time.Second, finished(id), stderr.String)
	}
	if it, _ := s.GetItem(ctx, ids[0]); string(it.Payload) != `{"v":"v1"}` {
		t.Errorf("first item's output = %s", it.Payload)
	}
	waitFor(t, "the dead item's webhook", 30*time.Second, func() bool {
		got, _, _ := sink.snapshot()
		for _, b := range got {
			if b.Event == redrive.EventItemDead && b.Item != nil && b.Item.ID == ids[1] {
				return true
			}
		}
		return false
	}, stderr.String)

	// The stage's flow control is on /metrics, of the workers running now.
	flowMetric := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, `redrive_flow_slow_start{dependency="hooked/work"}`) {
				return l
			}
		}
		return ""
	}
	if l := flowMetric(); l == "" {
		t.Errorf("no redrive_flow_slow_start of hooked/work on /metrics")
	}

	// Change the stage (its command's argument and its policy) and reload.
	v2 := strings.Replace(fmt.Sprintf(hookedPipeline, "v2"), "max_attempts: 1", "max_attempts: 2", 1)
	if err := os.WriteFile(file, []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload", 30*time.Second, func() bool { return strings.Contains(stderr.String(), "reloaded pipelines") }, stderr.String)
	id := enqueue(redrive.NewItem{Key: "ok2", Payload: []byte(`{"n":2}`)})[0]
	waitFor(t, "the item after the reload", 30*time.Second, finished(id), stderr.String)
	if it, _ := s.GetItem(ctx, id); string(it.Payload) != `{"v":"v2"}` {
		t.Errorf("output after reload = %s, want the changed stage's", it.Payload)
	}
	if l := flowMetric(); l == "" {
		t.Errorf("no redrive_flow_slow_start of hooked/work on /metrics after the reload")
	}
	hash := func(id int64) string {
		t.Helper()
		as, err := s.Attempts(ctx, id)
		if err != nil || len(as) == 0 {
			t.Fatalf("attempts of %d: %v, %v", id, as, err)
		}
		return as[len(as)-1].ConfigHash
	}
	before, after := hash(ids[0]), hash(id)
	if before == "" || before == after {
		t.Errorf("configuration hash before the reload %q, after %q: want two different hashes", before, after)
	}

	// A reload with a broken file keeps the running configuration.
	if err := os.WriteFile(file, []byte("name: hooked\nstages: 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "the failed reload", 30*time.Second, func() bool { return strings.Contains(stderr.String(), "reload failed") }, stderr.String)
	id = enqueue(redrive.NewItem{Key: "ok3", Payload: []byte(`{"n":3}`)})[0]
	waitFor(t, "the item after the failed reload", 30*time.Second, finished(id), stderr.String)
	if it, _ := s.GetItem(ctx, id); string(it.Payload) != `{"v":"v2"}` {
		t.Errorf("output after a failed reload = %s, want the running configuration's", it.Payload)
	}
	if h := hash(id); h != after {
		t.Errorf("configuration hash after a failed reload %q, want the running one's %q", h, after)
	}
	if _, _, bad := sink.snapshot(); bad != 0 {
		t.Errorf("%d webhook requests failed verification", bad)
	}
}
