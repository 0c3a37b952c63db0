package storetest

import (
	"cmp"
	"slices"
	"time"

	"github.com/redrive/redrive"
)

// callbacks returns the callback URLs of ns in order ("" for a webhook
// notification).
func callbacks(ns []redrive.Notification) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Callback
	}
	return out
}

// testOutboxCallbacks checks that an item's callback URL is stored and
// announced: item.dead always, item.succeeded only when the pipeline's
// subscription names it, each as a notification of its own beside the
// pipeline's webhook notification, in the transaction of the state change.
func testOutboxCallbacks(h *h) {
	o := h.outbox()
	const cbA, cbB, cbC = "https://a.example/cb?item=1", "https://b.example/cb", "http://127.0.0.1:9/c"
	// Pipeline "c" has no subscription: only its callbacks' deaths are
	// announced.
	c := h.run("c", "")
	in := h.enqueue(c, "a", Base, redrive.NewItem{Key: "k0", Callback: cbA}, redrive.NewItem{Key: "k1", Callback: cbB},
		redrive.NewItem{Key: "k2"}, redrive.NewItem{Key: "bad", Invalid: "not JSON", Callback: cbC})
	byID := map[int64]redrive.Lease{}
	for _, l := range h.claimAll("c", Base) {
		byID[l.Item.ID] = l
	}
	t1 := at(time.Second)
	h.complete(kill(byID[in[0]], t1, "final", "422 unprocessable"), succeed(byID[in[1]], t1),
		kill(byID[in[2]], t1, "final", "no callback"))
	ns := h.notifications(redrive.NotificationFilter{Pipeline: "c"})
	if got := callbacks(ns); !slices.Equal(got, []string{cbC, cbA}) {
		h.Fatalf("callbacks = %q, want the invalid item's and the killed item's (events %v)", got, events(ns))
	}
	inv, dead := ns[0], ns[1]
	if inv.Event != redrive.EventItemDead || inv.ItemID != in[3] || inv.Reason == nil || inv.Reason.Class != redrive.ClassInvalidInput {
		h.Errorf("invalid item's callback notification = %+v", inv)
	}
	if dead.Event != redrive.EventItemDead || dead.ItemID != in[0] || dead.ItemKey != "k0" || dead.RunID != c.ID ||
		dead.Reason == nil || dead.Reason.Error != "422 unprocessable" || dead.Status != redrive.NotificationPending {
		h.Errorf("dead item's callback notification = %+v (reason %+v)", dead, dead.Reason)
	}
	h.equalTime("callback OccurredAt", dead.OccurredAt, t1)
	if got := h.notifications(redrive.NotificationFilter{Pipeline: "c", Event: redrive.EventItemDead}); len(got) != 2 {
		h.Errorf("event filter listed %d callback notifications, want 2", len(got))
	}

	// Pipeline "p" subscribes item.dead and item.succeeded: an item with a
	// callback is announced to both the webhook and the callback.
	if err := o.Subscribe(h.ctx, "p", []string{redrive.EventItemDead, redrive.EventItemSucceeded}, Base); err != nil {
		h.Fatalf("Subscribe: %v", err)
	}
	p := h.run("p", "")
	pin := h.enqueue(p, "a", t1, redrive.NewItem{Key: "d", Callback: cbA}, redrive.NewItem{Key: "s", Callback: cbB},
		redrive.NewItem{Key: "x", Invalid: "bad", Callback: cbC})
	byID = map[int64]redrive.Lease{}
	for _, l := range h.claimAll("p", t1) {
		byID[l.Item.ID] = l
	}
	t2 := at(2 * time.Second)
	h.complete(kill(byID[pin[0]], t2, "final", "gone"), succeed(byID[pin[1]], t2))
	ns = h.notifications(redrive.NotificationFilter{Pipeline: "p"})
	type row struct {
		item     int64
		event    string
		callback string
	}
	got := make([]row, len(ns))
	for i, n := range ns {
		got[i] = row{n.ItemID, n.Event, n.Callback}
	}
	want := []row{
		{pin[2], redrive.EventItemDead, ""}, {pin[2], redrive.EventItemDead, cbC},
		{pin[0], redrive.EventItemDead, ""}, {pin[0], redrive.EventItemDead, cbA},
		{pin[1], redrive.EventItemSucceeded, ""}, {pin[1], redrive.EventItemSucceeded, cbB},
	}
	// The order of one item's two rows is the triggers' business.
	byRow := func(a, b row) int {
		return cmp.Or(cmp.Compare(a.item, b.item), cmp.Compare(a.event, b.event), cmp.Compare(a.callback, b.callback))
	}
	slices.SortFunc(got, byRow)
	slices.SortFunc(want, byRow)
	if !slices.Equal(got, want) {
		h.Fatalf("notifications = %+v,\nwant %+v", got, want)
	}
	ids := map[string]bool{}
	for _, n := range ns {
		ids[n.DeliveryID] = true
	}
	if len(ids) != len(ns) {
		h.Errorf("%d notifications share %d delivery ids", len(ns), len(ids))
	}

	// A large batch (PostgreSQL copies it) keeps callbacks too.
	big := make([]redrive.NewItem, 1500)
	big[700] = redrive.NewItem{Invalid: "broken", Callback: cbB}
	bin := h.enqueue(h.run("big", ""), "a", t2, big...)
	ns = h.notifications(redrive.NotificationFilter{Pipeline: "big"})
	if len(ns) != 1 || ns[0].ItemID != bin[700] || ns[0].Callback != cbB {
		h.Errorf("large batch: notifications = %+v, want one callback for item %d", ns, bin[700])
	}

	// Claims return callback notifications with their URL.
	cl, err := o.ClaimNotifications(h.ctx, redrive.ClaimRequest{Owner: "w", Pipelines: []string{"c"}, Limit: 10,
		Now: t2, LeaseUntil: t2.Add(time.Minute)})
	if err != nil || len(cl) != 2 || cl[1].Callback != cbA {
		h.Errorf("claim = %+v, %v", cl, err)
	}
}
