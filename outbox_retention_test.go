package redrive_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
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
		cfg.Now, cfg.OutboxRetention, cfg.RetentionInterval, cfg.RetentionBatch = clock.now, 2*time.Hour, 10*time.Millisecond, 1
		log := &outboxLog{Store: s, Outbox: o}
		startClient(t, log, cfg)
		// The five old ones go in batches growing from one; the two recent
		// stay.
		waitFor(t, "delivered notifications past retention deleted", func() bool { return count().Delivered == 2 })
		// The log records a call once it returns, which can be after the
		// count above saw its rows gone: wait for the short batch that
		// ends the deleting.
		waitFor(t, "the deleting pass to end", func() bool {
			limits, deleted := log.first()
			return len(limits) > 0 && deleted[len(deleted)-1] < limits[len(limits)-1]
		})
		// Batches of one would take six statements (the last one empty);
		// doubling takes three (1, 2, then 2 of 4). Only batches that each
		// took longer than a quarter second would keep the size at one.
		limits, deleted := log.first()
		if len(limits) == 0 || limits[0] != 1 || len(limits) >= 6 || sum(deleted) != 5 {
			t.Fatalf("the first deleting pass asked for %v and deleted %v; want a first batch of 1, growing, 5 in all", limits, deleted)
		}
		if c := count(); c != (redrive.NotificationCounts{Pending: 1, Delivered: 2, Dead: 1, Total: 4}) {
			t.Fatalf("after retention: %+v", c)
		}
		ns, err := o.ListNotifications(ctx, redrive.NotificationFilter{Statuses: []redrive.NotificationStatus{redrive.NotificationDelivered}})
		if err != nil || len(ns) != 2 || ns[0].ItemKey != "n1" || ns[1].ItemKey != "n2" {
			t.Fatalf("kept delivered = %+v, %v; want n1 and n2", ns, err)
		}
	})
}

// outboxLog records the DeleteDelivered calls made on a store's outbox.
type outboxLog struct {
	redrive.Store
	redrive.Outbox
	mu    sync.Mutex
	calls [][2]int // limit asked, rows deleted
}

func (s *outboxLog) DeleteDelivered(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := s.Outbox.DeleteDelivered(ctx, before, limit)
	s.mu.Lock()
	s.calls = append(s.calls, [2]int{limit, n})
	s.mu.Unlock()
	return n, err
}

// first returns the limits asked for and the rows deleted by the first
// pass that deleted any: its calls up to the first short batch.
func (s *outboxLog) first() (limits, deleted []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.calls {
		if len(limits) == 0 && c[1] == 0 {
			continue
		}
		limits, deleted = append(limits, c[0]), append(deleted, c[1])
		if c[1] < c[0] {
			break
		}
	}
	return limits, deleted
}

// slowDeliveredDeletes delays each DeleteDelivered of its outbox, so that
// a retention pass runs out of time with delivered notifications left.
type slowDeliveredDeletes struct {
	redrive.Store
	redrive.Outbox
	redrive.DeliveredCounter
	delay time.Duration
}

func (s slowDeliveredDeletes) DeleteDelivered(ctx context.Context, before time.Time, limit int) (int, error) {
	time.Sleep(s.delay)
	return s.Outbox.DeleteDelivered(ctx, before, limit)
}

// A retention pass that runs out of time with delivered notifications
// still coming back in full batches says so, as it does for succeeded
// items: its RetentionPassed event counts the delivered notifications it
// left (exactly those not deleted yet, nothing else deleting here), the log
// warns that retention is behind, and later passes delete the rest until
// one reports a backlog of 0.
func TestRetentionReportsNotificationBacklog(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		const n = 300
		o := s.(redrive.Outbox)
		clock := &retentionClock{t: time.Now()}
		if err := o.Subscribe(ctx, "p", []string{redrive.EventItemDead}, clock.now()); err != nil {
			t.Fatal(err)
		}
		run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, clock.now())
		if err != nil {
			t.Fatal(err)
		}
		in := make([]redrive.NewItem, n)
		for i := range in {
			in[i] = redrive.NewItem{Invalid: "bad"}
		}
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "p", Stage: "a", Now: clock.now(), Items: in}); err != nil {
			t.Fatal(err)
		}
		ns, err := o.ClaimNotifications(ctx, redrive.ClaimRequest{Owner: "w", Pipelines: []string{"p"}, Limit: n,
			Now: clock.now(), LeaseUntil: clock.now().Add(time.Minute)})
		if err != nil || len(ns) != n {
			t.Fatalf("ClaimNotifications: %d, %v; want %d", len(ns), err, n)
		}
		rs := make([]redrive.DeliveryResult, n)
		for i, x := range ns {
			rs[i] = redrive.DeliveryResult{ID: x.ID, Token: x.Token, Status: redrive.NotificationDelivered, Attempts: 1, Now: clock.now()}
		}
		if _, err := o.SettleNotifications(ctx, rs); err != nil {
			t.Fatal(err)
		}
		clock.add(2 * time.Hour)
		rec := &recorder{}
		cfg := testConfig(rec)
		logs := &captured{}
		cfg.Logger = slog.New(logs)
		// A pass has a second (the least it is given) for its batches of
		// 2, 4, 8, ... notifications, each 200 ms late: at most six
		// batches, 126 notifications, fewer than n.
		cfg.Now, cfg.OutboxRetention, cfg.RetentionInterval, cfg.RetentionBatch = clock.now, time.Hour, 10*time.Millisecond, 2
		dc, ok := s.(redrive.DeliveredCounter)
		if !ok {
			t.Fatalf("%T counts no delivered notifications", s)
		}
		startClient(t, slowDeliveredDeletes{Store: s, Outbox: o, DeliveredCounter: dc, delay: 200 * time.Millisecond}, cfg)
		waitBacklogCleared(t, rec, n, "notifications", func(p redrive.RetentionPassed) (int, int) { return p.Notifications, p.NotificationBacklog })
		if w := logs.matching("delivered notifications past retention accumulate"); len(w) == 0 {
			t.Errorf("no warning that the outbox's retention is behind; warnings: %q", logs.matching(""))
		}
		if c, err := o.CountNotifications(ctx, redrive.NotificationFilter{}); err != nil || c.Total != 0 {
			t.Errorf("after retention: %+v, %v; want none left", c, err)
		}
	})
}
