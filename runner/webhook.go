package runner

import (
	"net/url"
	"strings"
	"time"

	"github.com/redrive/redrive"
)

// WebhookSpec is the webhook: section of a pipeline file: where the
// pipeline's notifications (item.dead, run.finished, ...) are POSTed by
// `redrive serve --pipelines` workers. See docs/webhooks.md.
type WebhookSpec struct {
	// URL receives the notifications; ${VAR} expanded. Required: http or
	// https.
	URL string `yaml:"url"`
	// Secret keys the signature. It must come from the environment, as
	// "${VAR}", so that the file can be committed; the variable must be
	// set and not empty. Required.
	Secret string `yaml:"secret"`
	// Events are the events announced. Default item.dead and
	// run.finished; item.succeeded and item.canceled are opt-in.
	Events []string `yaml:"events"`
	// Retry schedules the retries of a failed delivery. Default (no retry
	// key): redrive.DefaultWebhookPolicy, 10 attempts from 1s up to 5m.
	Retry RetrySpec `yaml:"retry"`
	// Format is how requests are signed: "redrive" (the Redrive-Signature
	// header) or "standard" (Standard Webhooks' webhook-id,
	// webhook-timestamp and webhook-signature headers, verified by the
	// standardwebhooks libraries; the secret must then be whsec_<base64>).
	// Default "redrive".
	Format string `yaml:"format"`

	// Pos is where the mapping starts in the file (set by Parse).
	Pos Pos `yaml:"-"`
	// Keys holds the position of each key's value (set by Parse).
	Keys map[string]Pos `yaml:"-"`
}

// validate checks what does not depend on the environment.
func (w *WebhookSpec) validate() error {
	pos := func(k string) Pos { return keyPos(w.Keys, k, w.Pos) }
	if strings.TrimSpace(w.URL) == "" {
		return at(pos("url"), "webhook needs a url")
	}
	if strings.TrimSpace(w.Secret) == "" {
		return at(pos("secret"), "webhook needs a secret, from the environment: secret: ${WEBHOOK_SECRET}")
	}
	if !envRef.MatchString(w.Secret) {
		return at(pos("secret"), "webhook secret must come from the environment (secret: ${VAR}), not be written in the file")
	}
	for _, e := range w.Events {
		if !redrive.ValidEvent(e) {
			return at(pos("events"), "webhook event %q: want item.dead, item.succeeded, item.canceled or run.finished", e)
		}
	}
	switch redrive.WebhookFormat(w.Format) {
	case "", redrive.FormatRedrive, redrive.FormatStandard:
	default:
		return at(pos("format"), "webhook format %q: want redrive or standard", w.Format)
	}
	if _, ok := w.Keys["retry"]; ok {
		if _, err := w.Retry.policy(); err != nil {
			return err
		}
	}
	return nil
}

// WebhookConfig returns the pipeline's webhook with its ${VAR} expanded,
// or nil when the file has no webhook: section. An unset variable, an
// empty secret or a URL that is not http(s) is an error naming the file
// and line.
func (s *Spec) WebhookConfig() (*redrive.Webhook, error) {
	w := s.Webhook
	if w == nil {
		return nil, nil
	}
	pos := func(k string) Pos { return keyPos(w.Keys, k, w.Pos) }
	for _, f := range []struct{ key, v string }{{"url", w.URL}, {"secret", w.Secret}} {
		if err := checkEnv(pos(f.key), "webhook "+f.key, f.v); err != nil {
			return nil, specError(s.File, err)
		}
	}
	hook := &redrive.Webhook{Pipeline: s.Name, URL: expandEnv(w.URL), Secret: []byte(expandEnv(w.Secret)), Events: w.Events,
		Format: redrive.WebhookFormat(w.Format)}
	if len(hook.Secret) == 0 {
		return nil, specError(s.File, at(pos("secret"), "webhook secret %s is empty in the environment", w.Secret))
	}
	if hook.Format == redrive.FormatStandard {
		if _, err := redrive.SignStandard(hook.Secret, "", time.Time{}, nil); err != nil {
			// The value is a secret: the message names the variable only.
			return nil, specError(s.File, at(pos("secret"), "webhook secret %s: %v", w.Secret, err))
		}
	}
	if u, err := url.Parse(hook.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, specError(s.File, at(pos("url"), "webhook url must be an absolute http or https URL"))
	}
	if _, ok := w.Keys["retry"]; ok {
		pol, err := w.Retry.policy()
		if err != nil {
			return nil, specError(s.File, err)
		}
		hook.Policy = pol
	}
	if err := hook.Validate(); err != nil {
		return nil, specError(s.File, at(w.Pos, "%v", err))
	}
	return hook, nil
}
