package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveForTest starts `redrive serve` with args on a free loopback port and
// returns its base URL once /healthz answers, and its stderr.
func serveForTest(t *testing.T, f *fixture, env []string, args ...string) (string, *syncBuffer) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(binPath, f.args(append([]string{"serve", "--addr", addr}, args...)...)...)
	cmd.Env = cleanEnv(env...)
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	base := "http://" + addr
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, &stderr
			}
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\nstderr:\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer /healthz: %v\nstderr:\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeAlertThresholds: the stuck threshold and the dead-letter tiers
// come from the pipeline files' alerts: sections and serve's flags (for
// every pipeline, or PIPELINE=VALUE for one, which wins over the file), and
// are exported for the alert rules; bad values are usage errors naming the
// flag.
func TestServeAlertThresholds(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "scan.yaml")
	spec := "name: scan\nalerts:\n  stuck_after: 2h\n  dead_letters_warning: 50\n  dead_letters_critical: 500\nstages:\n  - name: read\n    exec: {command: cat}\n"
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	base, _ := serveForTest(t, f, nil, "--pipeline", file,
		"--stuck-after", "30m", "--stuck-after", "webhook=5m",
		"--dead-letters-critical", "2000", "--dead-letters-critical", "scan=900")
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantContains(t, "/metrics", string(body),
		`redrive_stuck_after_seconds{pipeline="ocr"} 1800`,
		`redrive_stuck_after_seconds{pipeline="webhook"} 300`,
		`redrive_stuck_after_seconds{pipeline="scan"} 7200`,
		`redrive_alert_dead_letters_per_hour{pipeline="ocr",severity="warning"} 10`,
		`redrive_alert_dead_letters_per_hour{pipeline="ocr",severity="critical"} 2000`,
		`redrive_alert_dead_letters_per_hour{pipeline="scan",severity="warning"} 50`,
		`redrive_alert_dead_letters_per_hour{pipeline="scan",severity="critical"} 900`)

	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"--stuck-after", "10ms"}, "--stuck-after"},
		{[]string{"--stuck-after", "=1h"}, "--stuck-after"},
		{[]string{"--dead-letters-warning", "ocr=-1"}, "--dead-letters-warning"},
		{[]string{"--dead-letters-warning", "100", "--dead-letters-critical", "10"}, "--dead-letters-critical"},
		{[]string{"--actor-header", "Authorization"}, "--actor-header"},
		{[]string{"--actor-header", "X Forwarded User"}, "--actor-header"},
	} {
		r := mustRun(t, 2, f.args(append([]string{"serve", "--addr", "127.0.0.1:0"}, c.args...)...)...)
		wantContains(t, strings.Join(c.args, " "), r.stderr, c.flag)
	}
}

// TestServeActorHeader: behind a proxy, serve --actor-header records the
// person the header names in the audit log, for the actions of the API
// and the console; on loopback serve does not warn.
func TestServeActorHeader(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	const token = "tok-actor-header-secret"
	base, stderr := serveForTest(t, f, []string{envAPIToken + "=" + token}, "--actor-header", "X-Forwarded-User")
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/stages/pause", strings.NewReader(`{"pipeline":"ocr","stage":"extract","reason":"OCR down"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-User", "alice@example.com")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pause through the proxy: %s", resp.Status)
	}
	acts := auditLog(t, f)
	if len(acts) != 1 || acts[0].Actor != "alice@example.com" || acts[0].Kind != "pause" {
		t.Errorf("audit log = %+v, want the pause by alice@example.com", acts)
	}
	if strings.Contains(stderr.String(), "actor-header is trusted") {
		t.Errorf("serve warns on loopback:\n%s", stderr.String())
	}
}
