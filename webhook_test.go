package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// TestSignatureVector pins the signature to a vector computed apart from
// this code: printf '1700000000.{"id":"d1"}' | openssl dgst -sha256 -hmac whsec_test
func TestSignatureVector(t *testing.T) {
	secret, body, at := []byte("whsec_test"), []byte(`{"id":"d1"}`), time.Unix(1700000000, 0)
	const want = "t=1700000000,v1=7aa818774b12d07b487b77188a423aa42da8d52da13f1fface316ecdf0a91f53"
	if got := redrive.Sign(secret, at, body); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	now := at.Add(time.Minute)
	if err := redrive.VerifySignature(secret, want, body, now, 0); err != nil {
		t.Errorf("Verify of the vector: %v", err)
	}
	// A second v1 (a rotated secret) may come first.
	if err := redrive.VerifySignature(secret, "t=1700000000,v1=00ff,v1="+want[len("t=1700000000,v1="):], body, now, 0); err != nil {
		t.Errorf("Verify with two v1 values: %v", err)
	}
	for name, c := range map[string]struct {
		secret, body []byte
		header       string
		now          time.Time
		want         error
	}{
		"wrong secret":  {[]byte("other"), body, want, now, redrive.ErrSignatureMismatch},
		"changed body":  {secret, []byte(`{"id":"d2"}`), want, now, redrive.ErrSignatureMismatch},
		"changed time":  {secret, body, strings.Replace(want, "t=1700000000", "t=1700000001", 1), now, redrive.ErrSignatureMismatch},
		"replayed late": {secret, body, want, at.Add(6 * time.Minute), redrive.ErrSignatureExpired},
		"no v1":         {secret, body, "t=1700000000", now, redrive.ErrSignatureMalformed},
		"not hex":       {secret, body, "t=1700000000,v1=zz", now, redrive.ErrSignatureMalformed},
		"empty":         {secret, body, "", now, redrive.ErrSignatureMalformed},
	} {
		if err := redrive.VerifySignature(c.secret, c.header, c.body, c.now, 0); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
	}
}

// receiver is a webhook endpoint on loopback that answers each delivery
// ID with the next of its scripted statuses (then 200) and verifies every
// request.
type receiver struct {
	t      *testing.T
	secret []byte
	now    func() time.Time

	mu     sync.Mutex
	script map[string][]int // by item key, or "run" for run events
	got    []delivery
}

type delivery struct {
	id, event, key string
	status         int
	at             time.Time
	body           redrive.WebhookBody
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		rc.t.Errorf("read body: %v", err)
		return
	}
	if err := redrive.VerifySignature(rc.secret, r.Header.Get(redrive.HeaderSignature), raw, rc.now(), 0); err != nil {
		rc.t.Errorf("signature: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var b redrive.WebhookBody
	if err := json.Unmarshal(raw, &b); err != nil {
		rc.t.Errorf("body: %v", err)
	}
	d := delivery{id: r.Header.Get(redrive.HeaderDelivery), event: r.Header.Get(redrive.HeaderEvent), key: "run", body: b, at: rc.now()}
	if d.id != b.ID || d.event != b.Event {
		rc.t.Errorf("headers %s %s disagree with the body %+v", d.id, d.event, b)
	}
	if b.Item != nil {
		d.key = b.Item.Key
	}
	rc.mu.Lock()
	d.status = http.StatusOK
	if s := rc.script[d.key]; len(s) > 0 {
		d.status, rc.script[d.key] = s[0], s[1:]
	}
	rc.got = append(rc.got, d)
	rc.mu.Unlock()
	if d.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "7")
	}
	w.WriteHeader(d.status)
}

func (rc *receiver) deliveries(key string) []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []delivery
	for _, d := range rc.got {
		if d.key == key {
			out = append(out, d)
		}
	}
	return out
}

// TestDeliverer delivers notifications of dead items and a finished run to
// a real HTTP receiver: a 429 with Retry-After waits as asked without
// consuming an attempt, a 5xx is retried on the policy's schedule, a 410
// makes the notification dead, and a redrive delivers it after all.
func TestDeliverer(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		var mu sync.Mutex
		clock := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
		now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
		tick := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
		rc := &receiver{t: t, secret: []byte("s3cret"), now: now,
			script: map[string][]int{"limited": {429}, "flaky": {500, 503}, "gone": {410}}}
		srv := httptest.NewServer(rc)
		defer srv.Close()
		d, err := redrive.NewDeliverer(s.(redrive.Outbox), redrive.DelivererConfig{Now: now, Webhooks: []redrive.Webhook{{
			Pipeline: "p", URL: srv.URL + "/hook", Secret: rc.secret,
			Policy: fast(5)}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Subscribe(ctx); err != nil {
			t.Fatal(err)
		}
		run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Now: now(), Items: []redrive.NewItem{
			{Key: "limited", Invalid: "bad"}, {Key: "flaky", Invalid: "bad"}, {Key: "gone", Invalid: "bad"}, {Key: "ok", Invalid: "bad"}}}); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.FinishRun(ctx, run.ID, redrive.RunFailed, "all dead", now()); err != nil || !ok {
			t.Fatalf("FinishRun = %v, %v", ok, err)
		}
		t0 := now()
		// Each pass delivers what is due; the clock moves a second between
		// passes, so the 429's 7 seconds take several passes.
		for range 20 {
			if _, err := d.DeliverOnce(ctx); err != nil {
				t.Fatal(err)
			}
			tick(time.Second)
		}
		o := s.(redrive.Outbox)
		list := func(st redrive.NotificationStatus) map[string]redrive.Notification {
			ns, err := o.ListNotifications(ctx, redrive.NotificationFilter{Statuses: []redrive.NotificationStatus{st}})
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]redrive.Notification{}
			for _, n := range ns {
				k := n.ItemKey
				if n.Event == redrive.EventRunFinished {
					k = "run"
				}
				m[k] = n
			}
			return m
		}
		delivered, dead := list(redrive.NotificationDelivered), list(redrive.NotificationDead)
		if len(delivered) != 4 || len(dead) != 1 {
			t.Fatalf("delivered %v, dead %v", delivered, dead)
		}
		if n := delivered["limited"]; n.Attempts != 1 || n.RateLimitWaits != 1 {
			t.Errorf("rate-limited notification: %+v", n)
		}
		if ds := rc.deliveries("limited"); len(ds) != 2 || ds[1].at.Sub(ds[0].at) < 7*time.Second {
			t.Errorf("rate-limited deliveries %+v: want a second one at least 7s after the first", ds)
		}
		if n := delivered["flaky"]; n.Attempts != 3 {
			t.Errorf("flaky notification: %+v", n)
		}
		if n := dead["gone"]; n.Attempts != 1 || n.LastError != "410 Gone" {
			t.Errorf("dead notification: %+v", n)
		}
		runs := rc.deliveries("run")
		if len(runs) != 1 || runs[0].body.Run == nil || runs[0].body.Run.Status != redrive.RunFailed ||
			runs[0].body.Run.Reason != "all dead" || runs[0].event != redrive.EventRunFinished {
			t.Errorf("run deliveries: %+v", runs)
		}
		ok := rc.deliveries("ok")
		if len(ok) != 1 || ok[0].body.Item.Reason == nil || ok[0].body.Item.Reason.Class != redrive.ClassInvalidInput ||
			!ok[0].body.OccurredAt.Equal(t0) || ok[0].event != redrive.EventItemDead {
			t.Errorf("ok deliveries: %+v", ok)
		}

		// The dead notification is redriven and delivered with its ID.
		if n, err := o.RedriveNotifications(ctx, redrive.NotificationFilter{Pipeline: "p"}, now()); err != nil || n != 1 {
			t.Fatalf("RedriveNotifications = %d, %v", n, err)
		}
		if n, err := d.DeliverOnce(ctx); err != nil || n != 1 {
			t.Fatalf("DeliverOnce after redrive = %d, %v", n, err)
		}
		gone := rc.deliveries("gone")
		if len(gone) != 2 || gone[0].id != gone[1].id || gone[1].status != http.StatusOK {
			t.Errorf("gone deliveries: %+v", gone)
		}
		if len(list(redrive.NotificationDead)) != 0 {
			t.Errorf("still dead after redrive")
		}
	})
}

// TestWebhookValidateAndLog checks that bad webhooks are refused naming
// the field, and that logging a webhook shows neither its secret nor a
// password in its URL.
func TestWebhookValidateAndLog(t *testing.T) {
	w := redrive.Webhook{Pipeline: "p", URL: "https://user:pa55@hooks.example/x", Secret: []byte("topsecret")}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	if s := w.String(); strings.Contains(s, "topsecret") || strings.Contains(s, "pa55") {
		t.Errorf("String shows a secret: %s", s)
	}
	for name, c := range map[string]struct {
		w    redrive.Webhook
		want string
	}{
		"no url":    {redrive.Webhook{Pipeline: "p", Secret: []byte("x")}, "url"},
		"ftp":       {redrive.Webhook{Pipeline: "p", URL: "ftp://h/x", Secret: []byte("x")}, "url"},
		"no secret": {redrive.Webhook{Pipeline: "p", URL: "http://h/x"}, "secret"},
		"event":     {redrive.Webhook{Pipeline: "p", URL: "http://h/x", Secret: []byte("x"), Events: []string{"item.lost"}}, "item.lost"},
	} {
		if err := c.w.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one naming %q", name, err, c.want)
		}
	}
}
