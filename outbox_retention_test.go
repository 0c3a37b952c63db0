package redrive_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// TestOutboxRetention checks that a started client deletes notifications
// delivered longer than OutboxRetention ago, in batches, and keeps dead
// and pending ones, and delivered ones that are younger.
func TestOutboxRetention(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		o := s.(redrive.Outbox)
		clock := &retentionClock{t: time.Now()}
		rc := &receiver{t: t, secret: []byte("s"), now: clock.now, script: map[string][]int{"gone": {http.StatusGone}}}
		srv := httptest.NewServer(rc)
		defer srv.Close()
		d, err := redrive.NewDeliverer(o, redrive.DelivererConfig{Now: clock.now,
			Webhooks: []redrive.Webhook{{Pipeline: "p", URL: srv.URL, Secret: rc.secret, Policy: fast(1)}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Subscribe(ctx); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"p", "unclaimed"} {
			if err := o.Subscribe(ctx, p, []string{redrive.EventItemDead}, clock.now()); err != nil {
				t.Fatal(err)
			}
		}
		enqueue := func(pipeline string, keys ...string) {
			t.Helper()
			run, _, err := s.CreateRun(ctx, pipeline, redrive.RunOptions{}, clock.now())
			if err != nil {
				t.Fatal(err)
			}
			items := make([]redrive.NewItem, len(keys))
			for i, k := range keys {
				items[i] = redrive.NewItem{Key: k, Invalid: "bad"}
			}
			if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: pipeline, Stage: "a", Now: clock.now(), Items: items}); err != nil {
				t.Fatal(err)
			}
		}
		deliverAll := func() {
			t.Helper()
			for {
				n, err := d.DeliverOnce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					return
				}
			}
		}
		// Five delivered and one dead, then three hours later two more
		// delivered; one stays pending (no deliverer claims its pipeline).
		enqueue("p", "o1", "o2", "o3", "o4", "o5", "gone")
		enqueue("unclaimed", "u1")
		deliverAll()
		clock.add(3 * time.Hour)
		enqueue("p", "n1", "n2")
		deliverAll()
		count := func() redrive.NotificationCounts {
			c, err := o.CountNotifications(ctx, redrive.NotificationFilter{})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		if c := count(); c != (redrive.NotificationCounts{Pending: 1, Delivered: 7, Dead: 1, Total: 9}) {
			t.Fatalf("before retention: %+v", c)
		}
		cfg := testConfig(nil)
		cfg.Now, cfg.OutboxRetention, cfg.RetentionInterval, cfg.RetentionBatch = clock.now, 2*time.Hour, 10*time.Millisecond, 2
		startClient(t, s, cfg)
		// The five old ones go in batches of two; the two recent stay.
		waitFor(t, "delivered notifications past retention deleted", func() bool { return count().Delivered == 2 })
		if c := count(); c != (redrive.NotificationCounts{Pending: 1, Delivered: 2, Dead: 1, Total: 4}) {
			t.Fatalf("after retention: %+v", c)
		}
		ns, err := o.ListNotifications(ctx, redrive.NotificationFilter{Statuses: []redrive.NotificationStatus{redrive.NotificationDelivered}})
		if err != nil || len(ns) != 2 || ns[0].ItemKey != "n1" || ns[1].ItemKey != "n2" {
			t.Fatalf("kept delivered = %+v, %v; want n1 and n2", ns, err)
		}
	})
}
