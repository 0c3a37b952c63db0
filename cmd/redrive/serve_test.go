package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// freePort returns a TCP port on loopback that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestServe(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	const token = "tok-3f9a1c-secret"
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(binPath, f.args("serve", "--addr", addr)...)
	cmd.Env = cleanEnv(envAPIToken + "=" + token)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := false
	t.Cleanup(func() {
		if !exited {
			cmd.Process.Kill()
			<-done
		}
	})

	base := "http://" + addr
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-done:
			exited = true
			t.Fatalf("serve exited early: %v\nstderr:\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer /healthz: %v\nstderr:\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	code, body := get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	wantContains(t, "/metrics", body, "redrive_items", "go_goroutines")
	code, body = get(fmt.Sprintf("/api/v1/runs/%d", f.run1))
	if code != http.StatusOK || !strings.Contains(body, `"ocr"`) {
		t.Errorf("GET run: %d %s", code, body)
	}

	post := func(auth string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/api/v1/dlq/redrive",
			strings.NewReader(fmt.Sprintf(`{"run": %d, "class": "final"}`, f.run1)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, auth := range []string{"", "Bearer wrong-token"} {
		if code, body := post(auth); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("redrive with auth %q: want 401 or 403, got %d %s", auth, code, body)
		}
	}
	if n := countItems(t, f, redrive.StateDead); n != 5 {
		t.Fatalf("unauthorized redrive changed state: %d dead", n)
	}
	code, body = post("Bearer " + token)
	if code != http.StatusOK {
		t.Fatalf("redrive with token: %d %s", code, body)
	}
	var res struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil || res.Count != 2 {
		t.Errorf("redrive with token: %s (%v)", body, err)
	}
	if n := countItems(t, f, redrive.StateDead); n != 3 {
		t.Errorf("after API redrive: %d dead, want 3", n)
	}
	_, body = get("/metrics")
	wantContains(t, "/metrics after redrive", body, "redrive_redriven")

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Errorf("serve after SIGINT: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not exit after SIGINT")
	}
	logs := stderr.String()
	wantContains(t, "serve log", logs, "listening", addr, "api-token(submit,admin)")
	if strings.Contains(logs+stdout.String(), token) {
		t.Errorf("serve logged the token:\n%s", logs)
	}
}

func TestServeBadAddr(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	r := mustRun(t, 2, f.args("serve", "--addr", "nonsense")...)
	wantContains(t, "stderr", r.stderr, "--addr")
	// A port that is taken: a failure, not a hang.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r = mustRun(t, 1, f.args("serve", "--addr", ln.Addr().String())...)
	wantContains(t, "stderr", r.stderr, "listen")
}

func TestServeRunsPipelineWorkers(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	yaml := filepath.Join(t.TempDir(), "webhook.yaml")
	if err := os.WriteFile(yaml, []byte("name: webhook\nstages:\n  - name: deliver\n    exec:\n      command: cat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A bad pipeline file is a usage error.
	r := mustRun(t, 2, f.args("serve", "--addr", "127.0.0.1:0", "--pipeline", yaml+".missing")...)
	wantContains(t, "stderr", r.stderr, "--pipeline")

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(binPath, f.args("serve", "--addr", addr, "--pipeline", yaml, "--workers", "2")...)
	cmd.Env = cleanEnv()
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
		case err := <-done:
			if err != nil {
				t.Errorf("serve after SIGINT: %v\n%s", err, stderr.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Errorf("serve with workers did not exit after SIGINT")
		}
	}()

	// Redrive the dead webhook item: serve's workers deliver it.
	mustRun(t, 0, f.args("dlq", "redrive", "--pipeline", "webhook", "--yes")...)
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := itemStates(t, f)["w1"]
		if st == redrive.StateSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("w1 still %s after redrive with workers running\nstderr:\n%s", st, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	var d itemDetail
	decodeJSON(t, mustRun(t, 0, f.args("items", "show", fmt.Sprint(f.ids["w1"]), "--json")...), &d)
	if n := len(d.Attempts); n != 2 || d.Attempts[1].Outcome != redrive.OutcomeSucceeded {
		t.Errorf("w1 attempts after redrive: %+v", d.Attempts)
	}
	wantContains(t, "serve log", stderr.String(), "running workers", "webhook")
}
