package redrive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/retry/retryhttp"
)

// Webhook sends the notifications of one pipeline to a URL.
type Webhook struct {
	// Pipeline is the pipeline whose notifications are sent. Required.
	Pipeline string
	// URL receives a POST per notification. Required: http or https.
	URL string
	// Secret keys the HMAC-SHA256 signature of every request. Required. It
	// is never logged: Webhook's LogValue leaves it out. With
	// FormatStandard it must be "whsec_" and the base64 of a key of at
	// least MinStandardKeyBytes bytes.
	Secret []byte
	// Format is how requests are signed: FormatRedrive (Redrive-Signature)
	// or FormatStandard (Standard Webhooks' headers, and Redrive-Signature
	// beside them). Default "": FormatRedrive.
	Format WebhookFormat
	// Events are the events announced; nil means DefaultEvents
	// (item.dead and run.finished). item.succeeded is opt-in.
	Events []string
	// Policy schedules the retries of a failed delivery: its MaxAttempts,
	// backoff and rate-limit waits (a 429 or 503 with Retry-After waits
	// as asked and does not consume an attempt). Failures are classified
	// by retryhttp: a 4xx other than 408, 425 and 429 is final and the
	// notification dead at once. A Policy whose MaxAttempts is 0 (the zero
	// value) is replaced by DefaultWebhookPolicy.
	Policy retry.Policy
}

// DefaultWebhookPolicy is the policy of a Webhook whose Policy is the
// zero value (MaxAttempts 0): 10 attempts, exponential backoff from 1s up to 5 minutes
// (about 12 minutes in all before a notification is dead).
var DefaultWebhookPolicy = retry.Policy{MaxAttempts: 10, BaseDelay: time.Second, MaxDelay: 5 * time.Minute}

// LogValue describes the webhook without its secret, and its URL without
// a password.
func (w Webhook) LogValue() slog.Value {
	u := w.URL
	if p, err := url.Parse(w.URL); err == nil {
		u = p.Redacted()
	}
	return slog.GroupValue(slog.String("pipeline", w.Pipeline), slog.String("url", u))
}

// String is LogValue's text, so that printing a Webhook shows no secret.
func (w Webhook) String() string { return w.LogValue().String() }

// Validate reports a webhook that cannot work, naming the field.
func (w Webhook) Validate() error {
	if w.Pipeline == "" {
		return errors.New("redrive: webhook: pipeline is required")
	}
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("redrive: webhook of pipeline %q: url must be an absolute http or https URL", w.Pipeline)
	}
	if len(w.Secret) == 0 {
		return fmt.Errorf("redrive: webhook of pipeline %q: secret is required", w.Pipeline)
	}
	switch w.Format {
	case "", FormatRedrive:
	case FormatStandard:
		if _, err := standardKey(w.Secret); err != nil {
			return fmt.Errorf("redrive: webhook of pipeline %q: secret: %w", w.Pipeline, err)
		}
	default:
		return fmt.Errorf("redrive: webhook of pipeline %q: unknown format %q (want redrive or standard)", w.Pipeline, w.Format)
	}
	for _, e := range w.Events {
		if !ValidEvent(e) {
			return fmt.Errorf("redrive: webhook of pipeline %q: unknown event %q (want item.dead, item.succeeded, item.canceled or run.finished)", w.Pipeline, e)
		}
	}
	if err := w.Policy.Validate(); err != nil {
		return fmt.Errorf("redrive: webhook of pipeline %q: policy: %w", w.Pipeline, err)
	}
	return nil
}

func (w Webhook) events() []string {
	if w.Events == nil {
		return DefaultEvents
	}
	return w.Events
}

func (w Webhook) policy() retry.Policy {
	if w.Policy.MaxAttempts == 0 {
		return DefaultWebhookPolicy
	}
	return w.Policy
}

// DelivererConfig configures a Deliverer. Zero values take the stated
// defaults.
type DelivererConfig struct {
	// Webhooks are the endpoints, at most one per pipeline. The callbacks
	// of their pipelines' items are delivered too, signed with the
	// webhook's Secret and retried by its Policy.
	Webhooks []Webhook
	// CallbackPipelines are further pipelines, without a webhook here,
	// whose items' callbacks this deliverer sends, signed with
	// CallbackSecret and retried by DefaultWebhookPolicy. Default none.
	CallbackPipelines []string
	// CallbackSecret keys the signature of the callbacks of
	// CallbackPipelines. It is never logged. Default none: a callback
	// with no secret to sign it is dead at once, with that reason.
	CallbackSecret []byte
	// APIURL is the base URL of the HTTP API that receivers read items
	// from, such as "https://redrive.example.com". An item.succeeded
	// notification whose output is left out (larger than
	// MaxNotificationOutput) names the item's URL, APIURL followed by
	// /api/v1/items/{id}. Default "": the URL is that path alone.
	APIURL string
	// Owner names this deliverer in the outbox's leases. Default
	// "deliverer".
	Owner string
	// Batch is the most notifications claimed at once. Default 32.
	Batch int
	// Concurrency is how many requests are in flight at once. Default 4.
	Concurrency int
	// PollInterval is how often an idle deliverer looks for due
	// notifications. Default 1s.
	PollInterval time.Duration
	// Timeout bounds one request, response included. Default 10s.
	Timeout time.Duration
	// LeaseDuration is how long claimed notifications stay leased: a
	// deliverer that vanishes leaves them to others after this long. A
	// batch's requests are cut off before its lease ends (and retried), so
	// that two deliverers never work one notification at once. Default 1
	// minute.
	LeaseDuration time.Duration
	// CallbackAllowPrivate lets item callbacks reach loopback, private,
	// link-local and other non-public addresses. Default false: a callback
	// URL is chosen by whoever submits the item, so by default the
	// deliverer connects for callbacks only to public addresses (checked on
	// the resolved address at connect time) and such a notification is
	// dead at once with ErrCallbackAddress. Webhooks, which the operator
	// configures, are not restricted. Ignored when HTTPClient is set.
	CallbackAllowPrivate bool
	// HTTPClient sends the requests, webhooks and callbacks alike. Default:
	// a client that follows no redirects (a redirect is a final failure)
	// and whose Timeout is Timeout, and for callbacks one that also
	// honours CallbackAllowPrivate.
	HTTPClient *http.Client
	// Logger receives delivery failures (never a secret). Default: none.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Deliverer delivers the outbox's notifications to webhooks: it claims due
// notifications with a lease, POSTs each signed, and records the result.
// Delivery is at least once: a crash after a POST and before its result is
// recorded sends it again, with the same Redrive-Delivery ID.
type Deliverer struct {
	store     Outbox
	cfg       DelivererConfig
	hooks     map[string]Webhook
	claimFrom []string // the pipelines of hooks and CallbackPipelines, sorted
	callbacks *http.Client
}

// NewDeliverer returns a deliverer of store's notifications, or an error
// naming a webhook that cannot work.
func NewDeliverer(store Outbox, cfg DelivererConfig) (*Deliverer, error) {
	hooks := make(map[string]Webhook, len(cfg.Webhooks))
	for _, w := range cfg.Webhooks {
		if err := w.Validate(); err != nil {
			return nil, err
		}
		if _, dup := hooks[w.Pipeline]; dup {
			return nil, fmt.Errorf("redrive: pipeline %q has two webhooks", w.Pipeline)
		}
		hooks[w.Pipeline] = w
	}
	if cfg.APIURL != "" {
		u, err := url.Parse(cfg.APIURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("redrive: deliverer: APIURL %q must be an absolute http or https URL", cfg.APIURL)
		}
		cfg.APIURL = strings.TrimRight(cfg.APIURL, "/")
	}
	if cfg.Owner == "" {
		cfg.Owner = "deliverer"
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 32
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = time.Minute
	}
	cbClient := cfg.HTTPClient
	if cbClient == nil {
		cbClient = callbackClient(cfg.Timeout, cfg.CallbackAllowPrivate)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{
			Timeout: cfg.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &Deliverer{store: store, cfg: cfg, hooks: hooks, callbacks: cbClient}
	d.claimFrom = append(d.pipelines(), cfg.CallbackPipelines...)
	slices.Sort(d.claimFrom)
	d.claimFrom = slices.Compact(d.claimFrom)
	return d, nil
}

// Subscribe records each webhook's events in the store, so that state
// changes from then on write notifications. Run calls it first.
func (d *Deliverer) Subscribe(ctx context.Context) error {
	for _, p := range d.pipelines() {
		if err := d.store.Subscribe(ctx, p, d.hooks[p].events(), d.cfg.Now()); err != nil {
			return err
		}
	}
	return nil
}

func (d *Deliverer) pipelines() []string {
	ps := make([]string, 0, len(d.hooks))
	for p := range d.hooks {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// Run subscribes, then delivers until ctx ends, and returns nil then.
// Store errors are logged and retried at the next poll.
func (d *Deliverer) Run(ctx context.Context) error {
	if len(d.claimFrom) == 0 {
		<-ctx.Done()
		return nil
	}
	for {
		err := d.Subscribe(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		d.cfg.Logger.Error("redrive: subscribing webhooks failed", "err", err)
		if !sleepCtx(ctx, d.cfg.PollInterval) {
			return nil
		}
	}
	for {
		n, err := d.DeliverOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			d.cfg.Logger.Error("redrive: delivering notifications failed", "err", err)
		}
		if n < d.cfg.Batch || err != nil {
			if !sleepCtx(ctx, d.cfg.PollInterval) {
				return nil
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// DeliverOnce claims one batch of due notifications, delivers them and
// records the results. It returns how many it claimed.
func (d *Deliverer) DeliverOnce(ctx context.Context) (int, error) {
	now := d.cfg.Now()
	ns, err := d.store.ClaimNotifications(ctx, ClaimRequest{Owner: d.cfg.Owner, Pipelines: d.claimFrom,
		Limit: d.cfg.Batch, Now: now, LeaseUntil: now.Add(d.cfg.LeaseDuration)})
	if err != nil || len(ns) == 0 {
		return 0, err
	}
	// Requests end a tenth of the lease before it does, leaving time to
	// record their results while the tokens are still current.
	sendCtx, cancel := context.WithTimeout(ctx, d.cfg.LeaseDuration-d.cfg.LeaseDuration/10)
	defer cancel()
	results := make([]DeliveryResult, len(ns))
	sem := make(chan struct{}, d.cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range ns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i] = d.deliver(sendCtx, ns[i])
		})
	}
	wg.Wait()
	// Recorded even when ctx ended meanwhile: the requests were sent.
	_, err = d.store.SettleNotifications(context.WithoutCancel(ctx), results)
	return len(ns), err
}

// deliver sends one notification and decides what becomes of it.
func (d *Deliverer) deliver(ctx context.Context, n Notification) DeliveryResult {
	w, err := d.target(n)
	pol := w.policy()
	res := DeliveryResult{ID: n.ID, Token: n.Token, Attempts: n.Attempts, RateLimitWaits: n.RateLimitWaits}
	var body []byte
	if err == nil {
		body, err = notificationBody(n, d.cfg.APIURL)
	}
	if err == nil {
		var resp *http.Response
		resp, err = d.post(ctx, w, n, body)
		res.Now = d.cfg.Now()
		if err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
			res.Status = NotificationDelivered
			res.Attempts++
			return res
		}
		var o retry.Outcome
		switch {
		case errors.Is(err, ErrCallbackAddress):
			o = retry.Outcome{Class: retry.ClassFinal}
		case err != nil:
			o = retryhttp.Classify(nil, err)
		case resp.StatusCode < 400:
			o = retry.Outcome{Class: retry.ClassFinal}
			err = fmt.Errorf("%s: redirects are not followed", resp.Status)
		default:
			o = retryhttp.Classify(resp, nil)
			err = errors.New(resp.Status)
		}
		return d.decide(res, n, pol, o, err)
	}
	res.Now = d.cfg.Now()
	return d.decide(res, n, pol, retry.Outcome{Class: retry.ClassFinal}, err)
}

// target is where n goes and how: its callback, signed with the
// pipeline's webhook secret or else the callback secret, or the pipeline's
// webhook. An error is final: nothing here can deliver n.
func (d *Deliverer) target(n Notification) (Webhook, error) {
	w, hooked := d.hooks[n.Pipeline]
	if n.Callback == "" {
		if !hooked {
			return w, fmt.Errorf("pipeline %q has no webhook in this deliverer", n.Pipeline)
		}
		return w, nil
	}
	if !hooked {
		w = Webhook{Pipeline: n.Pipeline, Secret: d.cfg.CallbackSecret}
	}
	w.URL = n.Callback
	if len(w.Secret) == 0 {
		return w, fmt.Errorf("no secret signs the callbacks of pipeline %q: give it a webhook or a callback secret", n.Pipeline)
	}
	return w, nil
}

func (d *Deliverer) decide(res DeliveryResult, n Notification, pol retry.Policy, o retry.Outcome, err error) DeliveryResult {
	res.Error = err.Error()
	res.Status = NotificationPending
	if o.Class == retry.ClassRateLimited {
		res.RateLimitWaits++
		if res.RateLimitWaits <= rateLimitWaits(pol) {
			res.NextAt = res.Now.Add(pol.RateLimitDelay(o.RetryAfter, res.RateLimitWaits))
			d.logFailure(n, res, "rate limited")
			return res
		}
	}
	res.Attempts++
	if o.Class == retry.ClassFinal || res.Attempts >= pol.Attempts() {
		res.Status = NotificationDead
		d.logFailure(n, res, "gave up")
		return res
	}
	res.NextAt = res.Now.Add(pol.Delay(res.Attempts))
	d.logFailure(n, res, "will retry")
	return res
}

func rateLimitWaits(p retry.Policy) int {
	if p.MaxRateLimitWaits <= 0 {
		return 10
	}
	return p.MaxRateLimitWaits
}

func (d *Deliverer) logFailure(n Notification, r DeliveryResult, what string) {
	d.cfg.Logger.Warn("redrive: webhook delivery failed, "+what, "pipeline", n.Pipeline, "delivery", n.DeliveryID,
		"event", n.Event, "attempts", r.Attempts, "err", r.Error)
}

func (d *Deliverer) post(ctx context.Context, w Webhook, n Notification, body []byte) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "redrive-webhook")
	req.Header.Set(HeaderDelivery, n.DeliveryID)
	req.Header.Set(HeaderEvent, n.Event)
	now := d.cfg.Now()
	req.Header.Set(HeaderSignature, Sign(w.Secret, now, body))
	if w.Format == FormatStandard {
		sig, err := SignStandard(w.Secret, n.DeliveryID, now, body)
		if err != nil {
			return nil, err // Validate checked the secret: not reached
		}
		// Set directly: the spec's lower-case names, as its libraries
		// show them, rather than Go's canonical form (HTTP/1.1 header
		// names are case-insensitive either way).
		req.Header[HeaderWebhookID] = []string{n.DeliveryID}
		req.Header[HeaderWebhookTimestamp] = []string{strconv.FormatInt(now.Unix(), 10)}
		req.Header[HeaderWebhookSignature] = []string{sig}
	}
	client := d.cfg.HTTPClient
	if n.Callback != "" {
		client = d.callbacks
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	// The answer's body is not kept: only its status and headers count.
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
	return resp, nil
}

// WebhookBody is the JSON body of a webhook request.
type WebhookBody struct {
	// ID is the delivery ID, as in the Redrive-Delivery header.
	ID         string    `json:"id"`
	Event      string    `json:"event"`
	OccurredAt time.Time `json:"occurred_at"`
	Pipeline   string    `json:"pipeline"`
	RunID      int64     `json:"run_id"`
	// Item is set for item events.
	Item *WebhookItem `json:"item,omitempty"`
	// Run is set for run.finished.
	Run *WebhookRun `json:"run,omitempty"`
}

// WebhookItem is the item an item event is about.
type WebhookItem struct {
	ID     int64   `json:"id"`
	Key    string  `json:"key,omitempty"`
	Stage  string  `json:"stage"`
	Reason *Reason `json:"reason,omitempty"`
	// Output is the item's output, in item.succeeded notifications, as
	// OutputEncoding says: the JSON value itself, or base64 for bytes
	// that are not JSON (EncodeBytes). Absent when the output is larger
	// than MaxNotificationOutput (OutputOmitted).
	Output json.RawMessage `json:"output,omitempty"`
	// OutputEncoding is EncodingJSON or EncodingBase64 when Output is set.
	OutputEncoding string `json:"output_encoding,omitempty"`
	// OutputSize is the output's size in bytes, carried or not.
	OutputSize int `json:"output_size,omitempty"`
	// OutputOmitted reports an output left out for its size; URL then
	// says where the API returns it.
	OutputOmitted bool `json:"output_omitted,omitempty"`
	// URL is the item in the HTTP API (GET returns its output), when its
	// output was left out: DelivererConfig.APIURL followed by
	// /api/v1/items/{id}.
	URL string `json:"url,omitempty"`
}

// WebhookRun is the run a run.finished event is about.
type WebhookRun struct {
	ID     int64     `json:"id"`
	Status RunStatus `json:"status"`
	Reason string    `json:"reason,omitempty"`
}

// NotificationBody returns the JSON body that announces n, with item URLs
// as paths (a Deliverer prefixes them with its APIURL). It depends on n
// alone, so every delivery of a notification sends the same body.
func NotificationBody(n Notification) ([]byte, error) {
	return notificationBody(n, "")
}

func notificationBody(n Notification, apiURL string) ([]byte, error) {
	b := WebhookBody{ID: n.DeliveryID, Event: n.Event, OccurredAt: n.OccurredAt, Pipeline: n.Pipeline, RunID: n.RunID}
	if n.Event == EventRunFinished {
		b.Run = &WebhookRun{ID: n.RunID, Status: n.RunStatus, Reason: n.RunReason}
	} else {
		it := &WebhookItem{ID: n.ItemID, Key: n.ItemKey, Stage: n.Stage, Reason: n.Reason}
		switch {
		case n.Output != nil:
			it.Output, it.OutputEncoding = EncodeBytes(n.Output)
			it.OutputSize = len(n.Output)
		case n.OutputOmitted:
			it.OutputOmitted, it.OutputSize = true, n.OutputSize
			it.URL = apiURL + "/api/v1/items/" + strconv.FormatInt(n.ItemID, 10)
		}
		b.Item = it
	}
	return json.Marshal(b)
}
