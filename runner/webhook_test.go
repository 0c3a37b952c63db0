package runner

import (
	"errors"
	"strings"
	"testing"

	"github.com/redrive/redrive"
)

const hookFile = `name: reports
stages:
  - name: render
    exec: {command: /bin/cat}
webhook:
  url: ${HOOK_URL}/redrive
  secret: ${HOOK_SECRET}
  events: [item.dead, item.succeeded]
  retry: {max_attempts: 4, base: 2s}
`

func TestWebhookConfig(t *testing.T) {
	t.Setenv("HOOK_URL", "http://127.0.0.1:9999")
	t.Setenv("HOOK_SECRET", "s3cret")
	s, err := Parse("reports.yaml", []byte(hookFile))
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.WebhookConfig()
	if err != nil {
		t.Fatal(err)
	}
	if w.Pipeline != "reports" || w.URL != "http://127.0.0.1:9999/redrive" || string(w.Secret) != "s3cret" ||
		len(w.Events) != 2 || w.Events[1] != redrive.EventItemSucceeded || w.Policy.MaxAttempts != 4 {
		t.Errorf("webhook = %+v", w)
	}
	noHook, err := Parse("p.yaml", []byte(strings.SplitN(hookFile, "webhook:", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	if w, err := noHook.WebhookConfig(); w != nil || err != nil {
		t.Errorf("a file without webhook: gave %v, %v", w, err)
	}
}

func TestWebhookErrors(t *testing.T) {
	t.Setenv("HOOK_URL", "http://127.0.0.1:9999")
	t.Setenv("EMPTY", "")
	for name, c := range map[string]struct{ from, to, want string }{
		"literal secret": {"${HOOK_SECRET}", "hunter2", "reports.yaml:7:11: webhook secret must come from the environment"},
		"bad event":      {"item.succeeded]", "item.lost]", `reports.yaml:8:11: webhook event "item.lost"`},
		"no url":         {"${HOOK_URL}/redrive", `""`, "reports.yaml:6:8: webhook needs a url"},
		"bad retry":      {"max_attempts: 4", "max_attempts: -1", "max_attempts -1"},
	} {
		_, err := Parse("reports.yaml", []byte(strings.Replace(hookFile, c.from, c.to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
	// The environment is checked when the webhook is used.
	s, err := Parse("reports.yaml", []byte(hookFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WebhookConfig(); err == nil || !strings.Contains(err.Error(), "reports.yaml:7:11: webhook secret uses ${HOOK_SECRET}") {
		t.Errorf("unset secret: %v", err)
	}
	s, _ = Parse("reports.yaml", []byte(strings.Replace(hookFile, "${HOOK_SECRET}", "${EMPTY}", 1)))
	if _, err := s.WebhookConfig(); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty secret: %v", err)
	}
}

// TestWebhookFormat reads format: standard, and refuses an unknown format
// and a standard secret that is not whsec_<base64>, naming the line and
// never the secret.
func TestWebhookFormat(t *testing.T) {
	t.Setenv("HOOK_URL", "http://127.0.0.1:9999")
	const key = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	file := strings.Replace(hookFile, "  retry:", "  format: standard\n  retry:", 1)
	t.Setenv("HOOK_SECRET", key)
	s, err := Parse("reports.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.WebhookConfig()
	if err != nil {
		t.Fatal(err)
	}
	if w.Format != redrive.FormatStandard || string(w.Secret) != key {
		t.Errorf("webhook = %+v", w)
	}

	t.Setenv("HOOK_SECRET", "plain-secret-value")
	s, _ = Parse("reports.yaml", []byte(file))
	_, err = s.WebhookConfig()
	if err == nil || !strings.Contains(err.Error(), `reports.yaml:7:11: webhook secret ${HOOK_SECRET}: a standard webhook secret must be "whsec_"`) ||
		strings.Contains(err.Error(), "plain-secret-value") {
		t.Errorf("secret without whsec_: %v", err)
	}
	t.Setenv("HOOK_SECRET", "whsec_c2hvcnQ=") // 5 bytes
	s, _ = Parse("reports.yaml", []byte(file))
	if _, err := s.WebhookConfig(); err == nil || !strings.Contains(err.Error(), "at least 24 random bytes") {
		t.Errorf("short key: %v", err)
	}

	_, err = Parse("reports.yaml", []byte(strings.Replace(file, "format: standard", "format: svix", 1)))
	if err == nil || !strings.Contains(err.Error(), `reports.yaml:9:11: webhook format "svix": want redrive or standard`) {
		t.Errorf("unknown format: %v", err)
	}
}
