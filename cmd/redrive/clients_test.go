package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
)

const (
	clientToken    = "client-token-7c1e90d2aa"
	callbackSecret = "callback-secret-41d9b0"
)

// echoStage returns its input, and fails finally (exit 3) for an input
// that asks to die.
const echoStage = `#!/bin/sh
in=$(cat)
case "$in" in
*'"die"'*) echo "refused: the input asks to die" >&2; exit 3 ;;
esac
printf '%s' "$in"
`

// servedPipeline starts `redrive serve` on a fresh SQLite database with
// workers for an echo pipeline (its stage returns its input, or fails for
// an input with "die"), a submit token and a callback secret, and returns
// its URL and database path. The server is stopped with SIGINT at the end
// of the test.
func servedPipeline(t *testing.T, extra ...string) (url, db string) {
	t.Helper()
	// The clients' receivers listen on loopback.
	return servedPipelineEnv(t, []string{"REDRIVE_CALLBACK_SECRET=" + callbackSecret}, append([]string{"--callback-allow-private"}, extra...)...)
}

// servedPipelineEnv is servedPipeline with env added to serve's
// environment instead of the callback secret.
func servedPipelineEnv(t *testing.T, env []string, extra ...string) (url, db string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "redrive.db")
	yaml := filepath.Join(dir, "echo.yaml")
	if err := os.WriteFile(filepath.Join(dir, "echo.sh"), []byte(echoStage), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(yaml, []byte("name: echo\nstages:\n  - name: shout\n    exec:\n      command: ./echo.sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# name scopes secret\nclient submit,read "+clientToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := append([]string{"--db", "sqlite:" + db, "serve", "--migrate", "--addr", addr, "--pipeline", yaml, "--token-file", tokens, "--workers", "8"}, extra...)
	cmd := exec.Command(binPath, args...)
	cmd.Env = cleanEnv(env...)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve after SIGINT: %v\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("serve did not stop after SIGINT")
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", stderr.String())
		}
	})
	url = "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, db
			}
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("serve exited: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clientSummary is what the example clients print.
type clientSummary struct {
	Webhooks *struct {
		Received       int      `json:"received"`
		Events         []string `json:"events"`
		DeadKeys       []string `json:"dead_keys"`
		Duplicates     int      `json:"duplicates"`
		Rejected       int      `json:"rejected"`
		ReplayStatus   int      `json:"replay_status"`
		TamperedStatus int      `json:"tampered_status"`
	} `json:"webhooks"`
	RunID           int64          `json:"run_id"`
	Added           int            `json:"added"`
	ExistingOnRetry int            `json:"existing_on_retry"`
	SameIDs         bool           `json:"same_ids"`
	States          map[string]int `json:"states"`
	OutputsMatching int            `json:"outputs_matching"`
	UnknownPipeline *struct {
		Status int    `json:"status"`
		Field  string `json:"field"`
	} `json:"unknown_pipeline"`
}

// TestExampleClients runs the Python and Node clients of examples/clients
// against a real server: they submit items with callbacks to their own
// webhook receivers, every fifth of which dies, retry the submit, read
// results, receive and verify the item.dead callbacks, and show that a
// replayed delivery is kept once and a tampered one refused.
func TestExampleClients(t *testing.T) {
	t.Parallel()
	url, db := servedPipeline(t)
	const count, dieEvery, dead = 25, 5, 5 // items 0, 5, 10, 15, 20 die
	for _, c := range []struct{ name, interp, script, run, prefix string }{
		{"python", "python3", "../../examples/clients/python/redrive_client.py", "python-demo", "py-"},
		{"node", "node", "../../examples/clients/node/redrive-client.mjs", "node-demo", "node-"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.interp); err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("%s is required in CI: %v", c.interp, err)
				}
				t.Skipf("%s not installed", c.interp)
			}
			cmd := exec.Command(c.interp, c.script, "--url", url, "--pipeline", "echo", "--run", c.run, "--count", fmt.Sprint(count),
				"--die-every", fmt.Sprint(dieEvery), "--callback-secret-env", "DEMO_CALLBACK_SECRET")
			cmd.Env = append(os.Environ(), "REDRIVE_TOKEN="+clientToken, "DEMO_CALLBACK_SECRET="+callbackSecret)
			out, err := cmd.Output()
			if err != nil {
				var stderr []byte
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = ee.Stderr
				}
				t.Fatalf("%s client: %v\n%s\n%s", c.name, err, out, stderr)
			}
			var s clientSummary
			if err := json.Unmarshal(out, &s); err != nil {
				t.Fatalf("client output %q: %v", out, err)
			}
			if s.Added != count || s.ExistingOnRetry != count || !s.SameIDs || s.States["succeeded"] != count-dead ||
				s.States["dead"] != dead || s.OutputsMatching != count-dead {
				t.Errorf("client summary = %+v", s)
			}
			var wantKeys []string
			for i := 0; i < count; i += dieEvery {
				wantKeys = append(wantKeys, fmt.Sprint(c.prefix, i))
			}
			slices.Sort(wantKeys)
			w := s.Webhooks
			switch {
			case w == nil:
				t.Errorf("the client received no callbacks")
			case w.Received != dead || !slices.Equal(w.DeadKeys, wantKeys) || !slices.Equal(w.Events, []string{"item.dead"}):
				t.Errorf("callbacks: received %d %v of %v, want %d item.dead of %v", w.Received, w.Events, w.DeadKeys, dead, wantKeys)
			case w.ReplayStatus != 200 || w.Duplicates < 1:
				t.Errorf("a replayed delivery: status %d, duplicates %d; want 200 and kept once", w.ReplayStatus, w.Duplicates)
			case w.TamperedStatus != 401 || w.Rejected != 1:
				t.Errorf("a tampered delivery: status %d, rejected %d; want 401 and 1", w.TamperedStatus, w.Rejected)
			}
			if s.UnknownPipeline == nil || s.UnknownPipeline.Status != 404 || s.UnknownPipeline.Field != "name" {
				t.Errorf("unknown pipeline answer = %+v", s.UnknownPipeline)
			}
			// The retried submit added nothing: the run holds count items.
			st, err := sqlite.Open(context.Background(), db)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			run, err := st.GetRun(context.Background(), s.RunID)
			if err != nil || run.Counts.Total != count || run.Counts.Succeeded != count-dead || run.Counts.Dead != dead {
				t.Errorf("run %d = %+v, %v; want %d items succeeded and %d dead", s.RunID, run.Counts, err, count-dead, dead)
			}
			// Every callback was delivered, once each in the outbox.
			ns, err := st.ListNotifications(context.Background(), redrive.NotificationFilter{Pipeline: "echo", Event: redrive.EventItemDead})
			if err != nil {
				t.Fatal(err)
			}
			mine := 0
			for _, n := range ns {
				if strings.HasPrefix(n.ItemKey, c.prefix) {
					mine++
					if n.Status != redrive.NotificationDelivered || n.Callback == "" {
						t.Errorf("notification %+v, want a delivered callback", n)
					}
				}
			}
			if mine != dead {
				t.Errorf("%d callback notifications in the outbox, want %d", mine, dead)
			}
			if run.Name != c.run || run.Status == redrive.RunAborted {
				t.Errorf("run = %+v", run)
			}
		})
	}
}

// TestServeCallbackSecret checks that serve refuses a callback no secret
// would sign, naming the field, and accepts it with --callback-secret-file;
// an empty secret file is a usage error.
func TestServeCallbackSecret(t *testing.T) {
	t.Parallel()
	submit := func(url string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/api/v1/pipelines/echo/items",
			strings.NewReader(`{"items":[{"input":{"n":1},"callback":"http://127.0.0.1:9/cb"}]}`))
		req.Header.Set("Authorization", "Bearer "+clientToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct{ Error, Field string }
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Field
	}
	url, _ := servedPipelineEnv(t, nil)
	if code, field := submit(url); code != http.StatusBadRequest || field != "items[0].callback" {
		t.Errorf("callback without a secret: %d on %q, want 400 on items[0].callback", code, field)
	}
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte(callbackSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url, _ = servedPipelineEnv(t, nil, "--callback-secret-file", secret)
	if code, field := submit(url); code != http.StatusCreated {
		t.Errorf("callback with --callback-secret-file: %d on %q, want 201", code, field)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, cleanEnv(), "--db", "sqlite:"+filepath.Join(dir, "x.db"), "serve", "--migrate", "--callback-secret-file", empty)
	if r.code != exitUsage || !strings.Contains(r.stderr, "callback-secret-file") {
		t.Errorf("empty secret file: exit %d, stderr %q", r.code, r.stderr)
	}
}
