package redrive_test

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// TestDelivererCallbacks delivers item callbacks to a real HTTP receiver:
// a pipeline with a webhook signs its callbacks with the webhook's secret,
// a pipeline without one with the callback secret, and a callback no
// secret can sign is dead at once with a reason naming the pipeline.
func TestDelivererCallbacks(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		var mu sync.Mutex
		clock := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
		now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
		hookSecret, cbSecret := []byte("hook-secret"), []byte("callback-secret")
		hook := &receiver{t: t, secret: hookSecret, now: now}
		viaHook := &receiver{t: t, secret: hookSecret, now: now}
		viaSecret := &receiver{t: t, secret: cbSecret, now: now}
		var srvs []*httptest.Server
		for _, rc := range []*receiver{hook, viaHook, viaSecret} {
			srv := httptest.NewServer(rc)
			defer srv.Close()
			srvs = append(srvs, srv)
		}
		o := s.(redrive.Outbox)
		d, err := redrive.NewDeliverer(o, redrive.DelivererConfig{Now: now,
			Webhooks:          []redrive.Webhook{{Pipeline: "hooked", URL: srvs[0].URL, Secret: hookSecret, Policy: fast(3)}},
			CallbackPipelines: []string{"plain", "hooked"}, CallbackSecret: cbSecret, CallbackAllowPrivate: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Subscribe(ctx); err != nil {
			t.Fatal(err)
		}
		enqueue := func(pipeline string, items ...redrive.NewItem) {
			t.Helper()
			run, _, err := s.CreateRun(ctx, pipeline, redrive.RunOptions{}, now())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: pipeline, Stage: "a", Now: now(), Items: items}); err != nil {
				t.Fatal(err)
			}
		}
		enqueue("hooked", redrive.NewItem{Key: "h1", Invalid: "bad", Callback: srvs[1].URL + "/cb?n=1"})
		enqueue("plain", redrive.NewItem{Key: "p1", Invalid: "bad", Callback: srvs[2].URL + "/cb"},
			redrive.NewItem{Key: "p2", Invalid: "bad", Callback: srvs[2].URL + "/cb"}, redrive.NewItem{Key: "p3", Invalid: "bad"})
		for {
			n, err := d.DeliverOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		if got := len(hook.deliveries("h1")); got != 1 {
			t.Errorf("webhook got %d deliveries of h1, want 1", got)
		}
		if got := viaHook.deliveries("h1"); len(got) != 1 || got[0].event != redrive.EventItemDead {
			t.Errorf("callback of the hooked pipeline: %+v, want one item.dead signed with the webhook's secret", got)
		}
		if p1, p2 := viaSecret.deliveries("p1"), viaSecret.deliveries("p2"); len(p1) != 1 || len(p2) != 1 || p1[0].id == p2[0].id {
			t.Errorf("callbacks of the plain pipeline: %+v %+v, want one each, signed with the callback secret", p1, p2)
		}
		delivered, err := o.ListNotifications(ctx, redrive.NotificationFilter{Statuses: []redrive.NotificationStatus{redrive.NotificationDelivered}})
		if err != nil || len(delivered) != 4 {
			t.Fatalf("delivered = %d, %v; want 4 (h1 twice, p1, p2)", len(delivered), err)
		}

		// Without a callback secret, a pipeline without a webhook cannot
		// sign: the callback is dead at once, saying why.
		d2, err := redrive.NewDeliverer(o, redrive.DelivererConfig{Now: now, CallbackPipelines: []string{"unsigned"}})
		if err != nil {
			t.Fatal(err)
		}
		enqueue("unsigned", redrive.NewItem{Key: "u1", Invalid: "bad", Callback: srvs[2].URL + "/cb"})
		if n, err := d2.DeliverOnce(ctx); err != nil || n != 1 {
			t.Fatalf("DeliverOnce = %d, %v", n, err)
		}
		dead, err := o.ListNotifications(ctx, redrive.NotificationFilter{Pipeline: "unsigned"})
		if err != nil || len(dead) != 1 || dead[0].Status != redrive.NotificationDead ||
			!strings.Contains(dead[0].LastError, `no secret signs the callbacks of pipeline "unsigned"`) {
			t.Fatalf("unsigned callback = %+v, %v", dead, err)
		}
		if got := viaSecret.deliveries("u1"); len(got) != 0 {
			t.Errorf("an unsigned callback was sent: %+v", got)
		}

		// By default a callback may not reach a loopback address: it is
		// dead at once, saying why, and nothing reaches the receiver.
		d3, err := redrive.NewDeliverer(o, redrive.DelivererConfig{Now: now, CallbackPipelines: []string{"internal"}, CallbackSecret: cbSecret})
		if err != nil {
			t.Fatal(err)
		}
		enqueue("internal", redrive.NewItem{Key: "i1", Invalid: "bad", Callback: srvs[2].URL + "/cb"})
		if n, err := d3.DeliverOnce(ctx); err != nil || n != 1 {
			t.Fatalf("DeliverOnce = %d, %v", n, err)
		}
		refused, err := o.ListNotifications(ctx, redrive.NotificationFilter{Pipeline: "internal"})
		if err != nil || len(refused) != 1 || refused[0].Status != redrive.NotificationDead || refused[0].Attempts != 1 ||
			!strings.Contains(refused[0].LastError, "127.0.0.1 is not a public address") {
			t.Fatalf("loopback callback = %+v, %v; want dead after one attempt, naming the address", refused, err)
		}
		if got := viaSecret.deliveries("i1"); len(got) != 0 {
			t.Errorf("a callback reached a loopback address: %+v", got)
		}
	})
}

func TestPublicAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.216.34": true, "2606:4700::1111": true, "8.8.8.8": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fd00::1": false, "0.0.0.0": false, "::": false,
		"100.64.0.1": false, "::ffff:127.0.0.1": false, "224.0.0.1": false,
	} {
		if got := redrive.PublicAddrForTest(netip.MustParseAddr(addr)); got != want {
			t.Errorf("publicAddr(%s) = %v, want %v", addr, got, want)
		}
	}
}
