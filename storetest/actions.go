package storetest

import (
	"errors"
	"time"

	"github.com/redrive/redrive"
)

// testRetryNow: items waiting on a backoff become due at once, claimable
// by the next claim, with their attempt counters as they were; items that
// are already due, running or finished are left alone.
func testRetryNow(h *h) {
	r := h.run("p", "")
	const n = 300
	t0 := Base
	h.enqueueN(r, "a", t0, n)
	ls := h.claimAll("p", t0)
	if len(ls) != n {
		h.Fatalf("claimed %d of %d", len(ls), n)
	}
	cs := make([]redrive.Completion, 0, n)
	for i, l := range ls {
		switch {
		case i < 250: // waiting an hour
			cs = append(cs, retry(l, t0, t0.Add(time.Hour), "503"))
		case i < 270: // due already
			cs = append(cs, retry(l, t0, t0, "503"))
		case i < 290:
			cs = append(cs, kill(l, t0, "final", "400"))
		default: // still running
		}
	}
	h.complete(cs...)
	now := t0.Add(time.Minute)
	waiting := redrive.ItemFilter{RunID: r.ID, States: []redrive.State{redrive.StatePending}, DueAfter: now}
	if c := h.count(waiting); c != 250 {
		h.Fatalf("Count(DueAfter now) = %d, want 250", c)
	}

	before := map[int64]redrive.Item{}
	for _, l := range ls[:250] {
		before[l.Item.ID] = h.item(l.Item.ID)
	}

	// A limit bounds it; the first 10 in ID order.
	got, err := h.s.RetryNow(h.ctx, redrive.ItemFilter{RunID: r.ID, Limit: 10}, now)
	if err != nil || got != 10 {
		h.Fatalf("RetryNow(limit 10) = %d, %v; want 10", got, err)
	}
	got, err = h.s.RetryNow(h.ctx, redrive.ItemFilter{RunID: r.ID}, now)
	if err != nil || got != 240 {
		h.Fatalf("RetryNow = %d, %v; want the other 240 waiting items", got, err)
	}
	if got, err := h.s.RetryNow(h.ctx, redrive.ItemFilter{RunID: r.ID}, now); err != nil || got != 0 {
		h.Errorf("RetryNow again = %d, %v; want 0: nothing waits", got, err)
	}
	if _, err := h.s.RetryNow(h.ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}}, now); err == nil {
		h.Error("RetryNow of dead items succeeded")
	}
	for id, b := range before {
		it := h.item(id)
		if it.State != redrive.StatePending || !it.NextAt.Equal(now) || it.Attempt != 1 || it.Attempt != b.Attempt ||
			it.FailedAttempts != b.FailedAttempts || it.RateLimitWaits != b.RateLimitWaits {
			h.Fatalf("item %d after RetryNow: %+v; want pending, due %v, counters as before: %+v", id, it, now, b)
		}
	}
	// One claim at now sees every one of them and the 20 that were due.
	claimed := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 1000, Now: now})
	if len(claimed) != 270 {
		h.Errorf("a claim after RetryNow took %d items, want 270", len(claimed))
	}
	for _, l := range claimed {
		if l.Item.Attempt != 1 {
			h.Errorf("item %d claimed with attempt %d, want 1: RetryNow must not reset or spend attempts", l.Item.ID, l.Item.Attempt)
			break
		}
	}
	if c := h.getRun(r.ID).Counts; !c.AddsUp() || c.Dead != 20 || c.Running != 280 {
		h.Errorf("counts after RetryNow and a claim = %+v", c)
	}
}

// testFilterKey: the key filter selects the item submitted with that key.
func testFilterKey(h *h) {
	_, m := dlqFixture(h)
	h.equalIDs("Key badreq", itemIDs(h.list(redrive.ItemFilter{Key: "badreq"})), []int64{m["badreq"]})
	h.equalIDs("Key badreq, pipeline p, dead", itemIDs(h.list(redrive.ItemFilter{Key: "badreq", Pipeline: "p", States: []redrive.State{redrive.StateDead}})), []int64{m["badreq"]})
	if c := h.count(redrive.ItemFilter{Key: "badreq", States: []redrive.State{redrive.StatePending}}); c != 0 {
		h.Errorf("Count(key badreq, pending) = %d, want 0", c)
	}
	if c := h.count(redrive.ItemFilter{Key: "nope"}); c != 0 {
		h.Errorf("Count(key nope) = %d, want 0", c)
	}
}

// testActionMarks: an action is linked to the items its filter selected;
// an item lists its actions oldest first; a deleted item loses its marks.
func testActionMarks(h *h) {
	r, m := dlqFixture(h)
	dead := redrive.ItemFilter{RunID: r.ID, States: []redrive.State{redrive.StateDead}}
	first, err := h.s.RecordAction(h.ctx, redrive.AuditAction{At: at(time.Hour), Actor: "ops", Kind: "redrive", Filter: "state=dead"})
	if err != nil {
		h.Fatal(err)
	}
	if n, err := h.s.MarkItems(h.ctx, first, dead); err != nil || n != 4 {
		h.Fatalf("MarkItems(dead) = %d, %v; want 4", n, err)
	}
	if n, err := h.s.MarkItems(h.ctx, first, dead); err != nil || n != 0 {
		h.Errorf("MarkItems(dead) again = %d, %v; want 0 new links", n, err)
	}
	if err := h.s.UpdateAction(h.ctx, first, 4, "rate 2/s"); err != nil {
		h.Fatal(err)
	}
	second, err := h.s.RecordAction(h.ctx, redrive.AuditAction{At: at(2 * time.Hour), Actor: "default", Kind: "cancel", Filter: "key=badreq"})
	if err != nil {
		h.Fatal(err)
	}
	if n, err := h.s.MarkItems(h.ctx, second, redrive.ItemFilter{Key: "badreq"}); err != nil || n != 1 {
		h.Fatalf("MarkItems(key badreq) = %d, %v; want 1", n, err)
	}
	acts, err := h.s.ItemActions(h.ctx, m["badreq"])
	if err != nil || len(acts) != 2 {
		h.Fatalf("ItemActions(badreq) = %+v, %v; want 2", acts, err)
	}
	want := redrive.AuditAction{ID: first, At: at(time.Hour), Actor: "ops", Kind: "redrive", Filter: "state=dead", Count: 4, Detail: "rate 2/s"}
	if acts[0] != want || acts[1].ID != second || acts[1].Kind != "cancel" {
		h.Errorf("ItemActions(badreq) = %+v; want %+v then the cancel", acts, want)
	}
	if acts, err := h.s.ItemActions(h.ctx, m["ok"]); err != nil || len(acts) != 0 {
		h.Errorf("ItemActions(ok) = %+v, %v; want none", acts, err)
	}
	if err := h.s.UpdateAction(h.ctx, second+1000, 1, ""); !errors.Is(err, redrive.ErrNotFound) {
		h.Errorf("UpdateAction of a missing action = %v, want ErrNotFound", err)
	}
	if n, err := h.s.Purge(h.ctx, redrive.ItemFilter{IDs: []int64{m["badreq"]}}); err != nil || n != 1 {
		h.Fatalf("Purge(badreq) = %d, %v", n, err)
	}
	if acts, err := h.s.ItemActions(h.ctx, m["badreq"]); err != nil || len(acts) != 0 {
		h.Errorf("ItemActions of a purged item = %+v, %v; want none", acts, err)
	}
	if acts, err := h.s.ItemActions(h.ctx, m["timeout"]); err != nil || len(acts) != 1 || acts[0].ID != first {
		h.Errorf("ItemActions(timeout) after another item's purge = %+v, %v", acts, err)
	}
}

// testRetryNowIsReady: an item retried now joins the ready items that
// claims walk at once, rather than waiting behind a backlog of due items
// still to be promoted (migration 0005): the next claim takes it first by
// its priority, though more than one promotion batch of lower-priority
// items became due before it.
func testRetryNowIsReady(h *h) {
	r := h.run("p", "")
	const backlog = 2100 // more than one claim's promotion batch
	t0 := Base
	items := make([]redrive.NewItem, backlog+1)
	items[backlog].Priority = 5
	enqueued := h.enqueue(r, "a", t0, items...)
	urgent := enqueued[backlog]
	ls := h.claimAll("p", t0)
	if len(ls) != backlog+1 {
		h.Fatalf("claimed %d of %d", len(ls), backlog+1)
	}
	cs := make([]redrive.Completion, len(ls))
	for i, l := range ls {
		next := t0.Add(30 * time.Second)
		if l.Item.ID == urgent {
			next = t0.Add(time.Hour)
		}
		cs[i] = retry(l, t0, next, "503")
	}
	h.complete(cs...)
	now := t0.Add(time.Minute)
	if n, err := h.s.RetryNow(h.ctx, redrive.ItemFilter{IDs: []int64{urgent}}, now); err != nil || n != 1 {
		h.Fatalf("RetryNow(urgent) = %d, %v", n, err)
	}
	got := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 1, Now: now})
	h.equalIDs("the first claim after RetryNow", ids(got), []int64{urgent})
}

// testFilterAction: ItemFilter.ActionID selects the items an action marked,
// whatever state they moved on to, with the other fields of the filter,
// in every read and write that takes a filter.
func testFilterAction(h *h) {
	r, m := dlqFixture(h)
	dead := []redrive.State{redrive.StateDead}
	redriven, err := h.s.RecordAction(h.ctx, redrive.AuditAction{At: at(time.Hour), Actor: "ops", Kind: "redrive"})
	if err != nil {
		h.Fatal(err)
	}
	// The final deaths only: badreq and percent.
	if n, err := h.s.MarkItems(h.ctx, redriven, redrive.ItemFilter{RunID: r.ID, States: dead, Class: "final"}); err != nil || n != 2 {
		h.Fatalf("MarkItems(final) = %d, %v; want 2", n, err)
	}
	other, err := h.s.RecordAction(h.ctx, redrive.AuditAction{At: at(time.Hour), Actor: "ops", Kind: "cancel"})
	if err != nil {
		h.Fatal(err)
	}
	if _, err := h.s.MarkItems(h.ctx, other, redrive.ItemFilter{Key: "pending"}); err != nil {
		h.Fatal(err)
	}
	marked := []int64{m["badreq"], m["percent"]}
	h.equalIDs("ActionID", itemIDs(h.list(redrive.ItemFilter{ActionID: redriven})), marked)
	h.equalIDs("ActionID, dead", itemIDs(h.list(redrive.ItemFilter{ActionID: redriven, States: dead})), marked)
	h.equalIDs("ActionID, key percent", itemIDs(h.list(redrive.ItemFilter{ActionID: redriven, Key: "percent"})), []int64{m["percent"]})
	if groups, err := h.s.FailureGroups(h.ctx, redrive.ItemFilter{ActionID: redriven, States: dead}); err != nil {
		h.Fatal(err)
	} else {
		deadIn := 0
		for _, g := range groups {
			deadIn += g.Dead
		}
		if deadIn != 2 {
			h.Errorf("FailureGroups(ActionID) count %d dead items in %+v, want the 2 marked", deadIn, groups)
		}
	}
	// The marked items move on; the filter still selects them.
	if n, err := h.s.Redrive(h.ctx, redrive.ItemFilter{ActionID: redriven, States: dead}, at(2*time.Hour), 0); err != nil || n != 2 {
		h.Fatalf("Redrive(ActionID) = %d, %v; want 2", n, err)
	}
	if c := h.count(redrive.ItemFilter{ActionID: redriven, States: []redrive.State{redrive.StatePending}}); c != 2 {
		h.Errorf("Count(ActionID, pending) after the redrive = %d, want 2", c)
	}
	if c := h.count(redrive.ItemFilter{RunID: r.ID, States: dead}); c != 2 {
		h.Errorf("%d dead items left, want the 2 that were not marked", c)
	}
	if c := h.count(redrive.ItemFilter{ActionID: other + 1000}); c != 0 {
		h.Errorf("Count(ActionID of no action) = %d, want 0", c)
	}
	if _, err := h.s.Count(h.ctx, redrive.ItemFilter{ActionID: -1}); err == nil {
		h.Error("Count(ActionID -1) succeeded")
	}
}
