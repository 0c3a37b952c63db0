package storetest

import (
	"errors"
	"slices"
	"time"

	"github.com/redrive/redrive"
)

// outbox returns the store's Outbox, or skips: it is optional.
func (h *h) outbox() redrive.Outbox {
	h.Helper()
	o, ok := h.s.(redrive.Outbox)
	if !ok {
		h.Skip("the store keeps no outbox")
	}
	return o
}

func (h *h) notifications(f redrive.NotificationFilter) []redrive.Notification {
	h.Helper()
	ns, err := h.outbox().ListNotifications(h.ctx, f)
	if err != nil {
		h.Fatalf("ListNotifications: %v", err)
	}
	return ns
}

func events(ns []redrive.Notification) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Event
	}
	return out
}

// testOutboxWrites checks that state changes of a subscribed pipeline write
// notifications for the subscribed events, by every way an item reaches
// them, and that nothing is written for others or for a completion that
// does not apply.
func testOutboxWrites(h *h) {
	o := h.outbox()
	if err := o.Subscribe(h.ctx, "p", []string{redrive.EventItemDead, redrive.EventRunFinished}, Base); err != nil {
		h.Fatalf("Subscribe: %v", err)
	}
	if err := o.Subscribe(h.ctx, "p", []string{"item.exploded"}, Base); err == nil {
		h.Errorf("Subscribe accepted an unknown event")
	}
	r := h.run("p", "")
	q := h.run("q", "") // not subscribed
	in := h.enqueue(r, "a", Base, redrive.NewItem{Key: "k0"}, redrive.NewItem{Key: "k1"},
		redrive.NewItem{Key: "bad", Invalid: "not JSON"}, redrive.NewItem{Key: "k3"})
	h.enqueueN(q, "a", Base, 2)
	ls := h.claimAll("p", Base)
	byID := map[int64]redrive.Lease{}
	for _, l := range ls {
		byID[l.Item.ID] = l
	}
	t1 := at(time.Second)
	stale := byID[in[3]]
	stale.Token++
	ap := h.complete(succeed(byID[in[0]], t1), kill(byID[in[1]], t1, "final", "400 bad request"),
		kill(stale, t1, "final", "fenced off"))
	if !slices.Equal(ap, []bool{true, true, false}) {
		h.Fatalf("applied = %v", ap)
	}
	for _, l := range h.claimAll("q", Base) {
		h.complete(kill(l, t1, "final", "q's failure"))
	}
	ns := h.notifications(redrive.NotificationFilter{})
	if got := events(ns); !slices.Equal(got, []string{redrive.EventItemDead, redrive.EventItemDead}) {
		h.Fatalf("events = %v, want the invalid item's and the killed item's item.dead", got)
	}
	inv, dead := ns[0], ns[1]
	if inv.ItemID != in[2] || inv.ItemKey != "bad" || inv.Reason == nil || inv.Reason.Class != redrive.ClassInvalidInput ||
		inv.Reason.Error != "not JSON" || inv.Pipeline != "p" || inv.RunID != r.ID {
		h.Errorf("invalid item's notification = %+v (reason %+v)", inv, inv.Reason)
	}
	if dead.ItemID != in[1] || dead.ItemKey != "k1" || dead.Stage != "a" || dead.Reason == nil ||
		dead.Reason.Class != "final" || dead.Reason.Error != "400 bad request" || dead.Reason.Attempts != 1 {
		h.Errorf("dead item's notification = %+v (reason %+v)", dead, dead.Reason)
	}
	h.equalTime("dead OccurredAt", dead.OccurredAt, t1)
	h.equalTime("dead NextAt", dead.NextAt, t1)
	for _, n := range ns {
		if n.Status != redrive.NotificationPending || n.Attempts != 0 || n.DeliveryID == "" {
			h.Errorf("new notification = %+v", n)
		}
	}
	if ns[0].DeliveryID == ns[1].DeliveryID {
		h.Errorf("two notifications share delivery id %q", ns[0].DeliveryID)
	}

	// Canceled is not subscribed; succeeded becomes so.
	if err := h.s.Release(h.ctx, []redrive.LeaseRef{byID[in[3]].Ref()}, t1); err != nil {
		h.Fatalf("Release: %v", err)
	}
	if n, err := h.s.CancelPending(h.ctx, redrive.ItemFilter{RunID: r.ID}, redrive.Reason{Class: "canceled", Error: "op", At: t1}); err != nil || n != 1 {
		h.Fatalf("CancelPending = %d, %v", n, err)
	}
	if len(h.notifications(redrive.NotificationFilter{AfterID: dead.ID})) != 0 {
		h.Errorf("a cancel wrote a notification without item.canceled subscribed")
	}
	if err := o.Subscribe(h.ctx, "p", []string{redrive.EventItemSucceeded, redrive.EventItemCanceled, redrive.EventRunFinished}, t1); err != nil {
		h.Fatalf("Subscribe: %v", err)
	}
	in2 := h.enqueue(r, "a", t1, redrive.NewItem{Key: "k4"}, redrive.NewItem{Key: "k5"})
	ls = h.claimAll("p", t1)
	if len(ls) != 2 {
		h.Fatalf("claimed %d", len(ls))
	}
	h.complete(succeed(ls[0], at(2*time.Second)))
	h.complete(kill(ls[1], at(2*time.Second), "final", "no longer subscribed"))
	ok, err := h.s.FinishRun(h.ctx, r.ID, redrive.RunPartialSuccess, "1 dead", at(3*time.Second))
	if err != nil || !ok {
		h.Fatalf("FinishRun = %v, %v", ok, err)
	}
	if ok, err := h.s.FinishRun(h.ctx, q.ID, redrive.RunFailed, "", at(3*time.Second)); err != nil || !ok {
		h.Fatalf("FinishRun(q) = %v, %v", ok, err)
	}
	ns = h.notifications(redrive.NotificationFilter{AfterID: dead.ID})
	if got := events(ns); !slices.Equal(got, []string{redrive.EventItemSucceeded, redrive.EventRunFinished}) {
		h.Fatalf("events = %v, want item.succeeded then run.finished", got)
	}
	if ns[0].ItemID != in2[0] {
		h.Errorf("succeeded notification names item %d, want %d", ns[0].ItemID, in2[0])
	}
	if rn := ns[1]; rn.RunID != r.ID || rn.ItemID != 0 || rn.RunStatus != redrive.RunPartialSuccess || rn.RunReason != "1 dead" {
		h.Errorf("run notification = %+v", rn)
	}
	h.equalTime("run OccurredAt", ns[1].OccurredAt, at(3*time.Second))

	// Unsubscribed: nothing more is written.
	if err := o.Subscribe(h.ctx, "p", nil, t1); err != nil {
		h.Fatalf("Subscribe(nil): %v", err)
	}
	h.enqueue(r, "a", t1, redrive.NewItem{Key: "bad2", Invalid: "again"})
	if got := h.notifications(redrive.NotificationFilter{AfterID: ns[1].ID}); len(got) != 0 {
		h.Errorf("after unsubscribing: %v", events(got))
	}
}

// testOutboxDelivery checks claiming with leases, fenced results, retries,
// dead notifications, listing filters and redrive.
func testOutboxDelivery(h *h) {
	o := h.outbox()
	if err := o.Subscribe(h.ctx, "p", []string{redrive.EventItemDead}, Base); err != nil {
		h.Fatalf("Subscribe: %v", err)
	}
	r := h.run("p", "")
	h.enqueue(r, "a", Base, redrive.NewItem{Invalid: "a"}, redrive.NewItem{Invalid: "b"}, redrive.NewItem{Invalid: "c"})
	claim := func(now time.Time, limit int) []redrive.Notification {
		h.Helper()
		ns, err := o.ClaimNotifications(h.ctx, redrive.ClaimRequest{Owner: "w1", Pipelines: []string{"p"}, Limit: limit,
			Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil {
			h.Fatalf("ClaimNotifications: %v", err)
		}
		return ns
	}
	if ns, err := o.ClaimNotifications(h.ctx, redrive.ClaimRequest{Pipelines: []string{"other"}, Limit: 10, Now: Base,
		LeaseUntil: at(time.Minute)}); err != nil || len(ns) != 0 {
		h.Fatalf("claim of another pipeline = %v, %v", ns, err)
	}
	first := claim(Base, 2)
	if len(first) != 2 {
		h.Fatalf("claimed %d, want 2", len(first))
	}
	rest := claim(Base, 10)
	if len(rest) != 1 {
		h.Fatalf("second claim got %d, want the one not leased", len(rest))
	}
	if again := claim(at(59*time.Second), 10); len(again) != 0 {
		h.Fatalf("leased notifications claimed again before the lease ended: %d", len(again))
	}
	// The lease of the first two ends: a vanished worker's claims come back
	// with a new token, and its late results are fenced off.
	retaken := claim(at(time.Minute), 2)
	if len(retaken) != 2 || retaken[0].ID != first[0].ID || retaken[0].Token == first[0].Token {
		h.Fatalf("retaken = %+v, first = %+v", retaken, first)
	}
	settle := func(rs ...redrive.DeliveryResult) []bool {
		h.Helper()
		ap, err := o.SettleNotifications(h.ctx, rs)
		if err != nil {
			h.Fatalf("SettleNotifications: %v", err)
		}
		return ap
	}
	t2 := at(61 * time.Second)
	ap := settle(
		redrive.DeliveryResult{ID: first[0].ID, Token: first[0].Token, Status: redrive.NotificationDelivered, Attempts: 1, Now: t2},
		redrive.DeliveryResult{ID: retaken[0].ID, Token: retaken[0].Token, Status: redrive.NotificationDelivered, Attempts: 1, Now: t2},
		redrive.DeliveryResult{ID: retaken[1].ID, Token: retaken[1].Token, Status: redrive.NotificationPending, Attempts: 1,
			RateLimitWaits: 1, NextAt: at(90 * time.Second), Error: "429 Too Many Requests", Now: t2},
	)
	settle(redrive.DeliveryResult{ID: rest[0].ID, Token: rest[0].Token, Status: redrive.NotificationDelivered, Attempts: 1, Now: t2})
	if !slices.Equal(ap, []bool{false, true, true}) {
		h.Fatalf("applied = %v, want the stale token fenced off", ap)
	}
	if again := settle(redrive.DeliveryResult{ID: retaken[0].ID, Token: retaken[0].Token, Status: redrive.NotificationDead, Now: t2}); again[0] {
		h.Errorf("a second result with the same token applied")
	}
	if got := claim(at(89*time.Second), 10); len(got) != 0 {
		h.Fatalf("a retry was claimed before it was due: %+v", got)
	}
	rt := claim(at(90*time.Second), 10)
	if len(rt) != 1 || rt[0].ID != retaken[1].ID || rt[0].Attempts != 1 || rt[0].RateLimitWaits != 1 ||
		rt[0].LastError != "429 Too Many Requests" {
		h.Fatalf("retry claim = %+v", rt)
	}
	settle(redrive.DeliveryResult{ID: rt[0].ID, Token: rt[0].Token, Status: redrive.NotificationDead, Attempts: 2,
		Error: "410 Gone", Now: at(91 * time.Second)})

	dead := h.notifications(redrive.NotificationFilter{Statuses: []redrive.NotificationStatus{redrive.NotificationDead}})
	if len(dead) != 1 || dead[0].ID != rt[0].ID || dead[0].LastError != "410 Gone" || dead[0].Attempts != 2 {
		h.Fatalf("dead = %+v", dead)
	}
	delivered := h.notifications(redrive.NotificationFilter{Statuses: []redrive.NotificationStatus{redrive.NotificationDelivered}})
	if len(delivered) != 2 || delivered[0].ID != first[0].ID {
		h.Fatalf("delivered = %+v", delivered)
	}
	if got := h.notifications(redrive.NotificationFilter{Pipeline: "q"}); len(got) != 0 {
		h.Errorf("pipeline filter: %+v", got)
	}
	if got := h.notifications(redrive.NotificationFilter{Limit: 1}); len(got) != 1 {
		h.Errorf("limit 1 listed %d", len(got))
	}
	if _, err := o.ListNotifications(h.ctx, redrive.NotificationFilter{Statuses: []redrive.NotificationStatus{"lost"}}); !errors.Is(err, redrive.ErrBadNotificationFilter) {
		h.Errorf("unknown status: %v", err)
	}
	if _, err := o.RedriveNotifications(h.ctx, redrive.NotificationFilter{Statuses: []redrive.NotificationStatus{redrive.NotificationDelivered}}, t2); !errors.Is(err, redrive.ErrBadNotificationFilter) {
		h.Errorf("redrive of delivered notifications: %v", err)
	}
	n, err := o.RedriveNotifications(h.ctx, redrive.NotificationFilter{Pipeline: "p"}, at(100*time.Second))
	if err != nil || n != 1 {
		h.Fatalf("RedriveNotifications = %d, %v", n, err)
	}
	back := claim(at(100*time.Second), 10)
	if len(back) != 1 || back[0].ID != dead[0].ID || back[0].Attempts != 0 || back[0].DeliveryID != dead[0].DeliveryID {
		h.Fatalf("redriven claim = %+v", back)
	}
	// Retention deletes the notifications delivered before its cutoff, at
	// most its limit at a time, and nothing else; a store that counts them
	// (redrive.DeliveredCounter) counts the same ones.
	if dc, ok := h.s.(redrive.DeliveredCounter); ok {
		for _, c := range []struct {
			before      time.Time
			limit, want int
		}{{t2, 0, 0}, {at(62 * time.Second), 0, 2}, {at(62 * time.Second), 1, 1}, {at(time.Hour), 10, 2}} {
			if n, err := dc.CountDelivered(h.ctx, c.before, c.limit); err != nil || n != c.want {
				h.Errorf("CountDelivered(%v, %d) = %d, %v; want %d", c.before.Sub(Base), c.limit, n, err, c.want)
			}
		}
	}
	for _, c := range []struct {
		before      time.Time
		limit, want int
	}{{t2, 10, 0}, {at(62 * time.Second), 1, 1}, {at(62 * time.Second), 10, 1}, {at(time.Hour), 10, 0}} {
		if n, err := o.DeleteDelivered(h.ctx, c.before, c.limit); err != nil || n != c.want {
			h.Fatalf("DeleteDelivered(%v, %d) = %d, %v; want %d", c.before.Sub(Base), c.limit, n, err, c.want)
		}
	}
	if left := h.notifications(redrive.NotificationFilter{}); len(left) != 1 || left[0].ID != back[0].ID {
		h.Errorf("after retention: %+v; want the redriven notification alone", left)
	}
}
