package main

import (
	"bufio"
	"bytes"
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
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/redrive/redrive"
)

// The secrets of TestStandardWebhooks: whsec_ and the base64 of 24 bytes,
// as Standard Webhooks' libraries and svix make them.
const (
	stdSecret      = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	stdOtherSecret = "whsec_c2VjcmV0LW9mLWFub3RoZXItcmVjZWl2ZXIh"
)

// stdStage answers by its input: a JSON echo, a JSON string, an output
// over redrive.MaxNotificationOutput (a string of 70,000 x), or a failure.
// (Exec stages print JSON; bytes that are not JSON, sent in base64, are
// checked by the store and web tests.)
const stdStage = `#!/bin/sh
in=$(cat)
case "$in" in
*big*) printf '"'; head -c 70000 /dev/zero | tr '\0' x; printf '"' ;;
*text*) printf '"plain text"' ;;
*die*) echo "told to die" >&2; exit 1 ;;
*) printf '%s' "$in" ;;
esac
`

const stdPipeline = `name: %s
stages:
  - name: work
    exec:
      command: ./stage.sh
    retry: {max_attempts: 1}
webhook:
  url: ${%s}
  secret: ${%s}
  format: standard
  events: [item.succeeded, item.dead]
`

// received is what a receiver made of one request.
type received struct {
	OK    bool                `json:"ok"`
	ID    string              `json:"id"`
	Body  redrive.WebhookBody `json:"body"`
	Error string              `json:"error"`
}

// receivedLog collects a receiver's requests.
type receivedLog struct {
	mu   sync.Mutex
	reqs []received
}

func (l *receivedLog) add(r received) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, r)
}

func (l *receivedLog) all() []received {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]received(nil), l.reqs...)
}

func (l *receivedLog) String() string { b, _ := json.Marshal(l.all()); return string(b) }

// goReceiver verifies with the Go library of Standard Webhooks.
func goReceiver(t *testing.T, secret string) (*httptest.Server, *receivedLog) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	log := &receivedLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err := wh.Verify(body, r.Header); err != nil {
			log.add(received{Error: err.Error()})
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		rec := received{OK: true, ID: r.Header.Get("webhook-id")}
		if err := json.Unmarshal(body, &rec.Body); err != nil {
			rec.OK, rec.Error = false, err.Error()
		}
		log.add(rec)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, log
}

// nodeReceiver installs the standardwebhooks npm package (1.1.1) into a
// temporary directory and starts testdata/standardwebhooks/receiver.js
// there. It returns "" when node or npm is missing outside CI; in CI
// (CI=true) a missing tool fails the test.
func nodeReceiver(t *testing.T, secret string) (string, *receivedLog) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is required in CI for the Standard Webhooks check: %v", tool, err)
			}
			t.Logf("%s not found: the npm standardwebhooks check is skipped (it runs in CI)", tool)
			return "", nil
		}
	}
	dir := t.TempDir()
	for _, f := range []string{"receiver.js", "package.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "standardwebhooks", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	install := exec.Command("npm", "install", "--no-audit", "--no-fund", "--no-package-lock", "--loglevel=error")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm install standardwebhooks@1.1.1: %v\n%s", err, out)
	}
	cmd := exec.Command("node", "receiver.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SECRET="+secret)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	port := make(chan int, 1)
	log := &receivedLog{}
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l struct {
				received
				Listening int `json:"listening"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				log.add(received{Error: "unreadable line: " + sc.Text()})
				continue
			}
			if l.Listening != 0 {
				port <- l.Listening
				continue
			}
			log.add(l.received)
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		cmd.Wait()
	})
	select {
	case p := <-port:
		return fmt.Sprintf("http://127.0.0.1:%d", p), log
	case <-done:
		t.Fatalf("the node receiver exited: %s", stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the node receiver did not start: %s", stderr.String())
	}
	return "", nil
}

// TestStandardWebhooks runs `redrive serve` with pipelines whose webhooks
// use format: standard, and has the deliveries verified by the maintained
// Standard Webhooks libraries: the npm package standardwebhooks 1.1.1 and
// the Go package. A receiver with another secret refuses them (401), which
// kills the notification, so the check is real. On the way it reads the
// results as a client would: submit, wait for the run, export its items.
func TestStandardWebhooks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "stage.sh"), []byte(stdStage), 0o755); err != nil {
		t.Fatal(err)
	}
	pipelines := map[string]*receivedLog{}
	write := func(name, urlVar, secretVar string) {
		b := fmt.Sprintf(stdPipeline, name, urlVar, secretVar)
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goSrv, goLog := goReceiver(t, stdSecret)
	write("stdgo", "HOOK_GO_URL", "HOOK_SECRET")
	pipelines["stdgo"] = goLog
	// The Go receiver knows stdSecret only: stdother's requests, signed
	// with another secret, must fail there.
	write("stdother", "HOOK_GO_URL", "HOOK_OTHER_SECRET")
	nodeURL, nodeLog := nodeReceiver(t, stdSecret)
	if nodeURL != "" {
		write("stdnode", "HOOK_NODE_URL", "HOOK_SECRET")
		pipelines["stdnode"] = nodeLog
	}

	const token = "std-webhooks-token"
	public := "https://redrive.example.com/"
	db := filepath.Join(t.TempDir(), "redrive.db")
	env := cleanEnv("HOOK_GO_URL="+goSrv.URL, "HOOK_NODE_URL="+nodeURL, "HOOK_SECRET="+stdSecret,
		"HOOK_OTHER_SECRET="+stdOtherSecret, "REDRIVE_API_TOKEN="+token)
	_, serveLog, base := startServeAt(t, env, "--db", "sqlite:"+db, "serve", "--migrate", "--pipelines", dir,
		"--public-url", public)
	if strings.Contains(serveLog.String(), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") {
		t.Errorf("serve logged the secret")
	}
	api := func(method, path, body string) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return b
	}
	const items = `{"pipeline":"%s","items":[{"key":"json","input":{"kind":"json","n":1}},{"key":"text","input":{"kind":"text"}},` +
		`{"key":"big","input":{"kind":"big"}},{"key":"die","input":{"kind":"die"}}]}`

	for name, log := range pipelines {
		var sub struct {
			Run   redrive.Run `json:"run"`
			Items []struct {
				ID  int64  `json:"id"`
				Key string `json:"key"`
			} `json:"items"`
		}
		if err := json.Unmarshal(api("POST", "/api/v1/runs", fmt.Sprintf(items, name)), &sub); err != nil {
			t.Fatal(err)
		}
		ids := map[string]int64{}
		for _, it := range sub.Items {
			ids[it.Key] = it.ID
		}

		// Wait for the run, then export its results.
		var run struct {
			Run redrive.Run `json:"run"`
		}
		deadline := time.Now().Add(2 * time.Minute)
		for run.Run.Status == "" || run.Run.Status == redrive.RunRunning {
			if time.Now().After(deadline) {
				t.Fatalf("%s: run %d still running", name, sub.Run.ID)
			}
			if err := json.Unmarshal(api("GET", fmt.Sprintf("/api/v1/runs/%d?wait=30s", sub.Run.ID), ""), &run); err != nil {
				t.Fatal(err)
			}
		}
		if run.Run.Counts.Succeeded != 3 || run.Run.Counts.Dead != 1 {
			t.Fatalf("%s: run ended %s with %+v", name, run.Run.Status, run.Run.Counts)
		}
		export := api("GET", fmt.Sprintf("/api/v1/runs/%d/items.ndjson", sub.Run.ID), "")
		lines := map[string]map[string]json.RawMessage{}
		for l := range bytes.SplitSeq(bytes.TrimSpace(export), []byte("\n")) {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("%s: export line %q: %v", name, l, err)
			}
			var key string
			_ = json.Unmarshal(m["key"], &key)
			lines[key] = m
		}
		if len(lines) != 3 || string(lines["json"]["output"]) != `{"kind":"json","n":1}` ||
			string(lines["text"]["output"]) != `"plain text"` || string(lines["text"]["output_encoding"]) != `"json"` ||
			len(lines["big"]["output"]) != 70002 {
			t.Errorf("%s: export %s", name, export)
		}

		// Every notification verified by the library, and carrying what
		// it should.
		waitFor(t, name+"'s four notifications", 2*time.Minute, func() bool { return len(log.all()) >= 4 }, log.String)
		byKey := map[string]redrive.WebhookItem{}
		for _, r := range log.all() {
			if !r.OK || r.Body.Item == nil || r.ID != r.Body.ID || r.Body.Pipeline != name {
				t.Fatalf("%s: request %+v", name, r)
			}
			byKey[r.Body.Item.Key] = *r.Body.Item
		}
		if it := byKey["json"]; string(it.Output) != `{"kind":"json","n":1}` || it.OutputEncoding != "json" {
			t.Errorf("%s: json item's notification %+v", name, it)
		}
		if it := byKey["text"]; it.OutputEncoding != "json" || string(it.Output) != `"plain text"` {
			t.Errorf("%s: text item's notification %+v", name, it)
		}
		want := fmt.Sprintf("https://redrive.example.com/api/v1/items/%d", ids["big"])
		if it := byKey["big"]; it.Output != nil || !it.OutputOmitted || it.OutputSize != 70002 || it.URL != want {
			t.Errorf("%s: big item's notification %+v, want the output left out and the URL %s", name, it, want)
		}
		if it := byKey["die"]; it.Reason == nil || !strings.Contains(it.Reason.Error, "told to die") || it.Output != nil {
			t.Errorf("%s: dead item's notification %+v", name, it)
		}
	}

	// stdother's notifications fail verification: 401 kills each.
	api("POST", "/api/v1/runs", `{"pipeline":"stdother","items":[{"key":"x","input":{"kind":"json"}}]}`)
	var dead struct {
		Data []redrive.Notification `json:"data"`
	}
	waitFor(t, "stdother's notification to die", 2*time.Minute, func() bool {
		_ = json.Unmarshal(api("GET", "/api/v1/outbox?pipeline=stdother&state=dead", ""), &dead)
		return len(dead.Data) == 1
	}, goLog.String)
	if !strings.Contains(dead.Data[0].LastError, "401") {
		t.Errorf("stdother's notification died of %q, want the receiver's 401", dead.Data[0].LastError)
	}
	refused := 0
	for _, r := range goLog.all() {
		if !r.OK && strings.Contains(r.Error, "no matching signature") {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("the Go library refused %d requests, want stdother's one: %s", refused, goLog)
	}
}
