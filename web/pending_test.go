package web_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

// itemDetail is the part of GET /api/v1/items/{id} these tests read.
type itemDetail struct {
	Item    redrive.Item
	Actions []redrive.AuditAction
}

// detail reads an item with the read token tok ("" for open reads).
func (f *fixture) detail(t *testing.T, tok string, id int64) itemDetail {
	t.Helper()
	var d itemDetail
	r := f.send(t, "GET", fmt.Sprintf("/api/v1/items/%d", id), tok, "")
	if r.code != http.StatusOK {
		t.Fatalf("GET item %d: %d %s", id, r.code, r.body)
	}
	r.json(t, &d)
	return d
}

func (f *fixture) byKey(t *testing.T, key string) redrive.Item {
	t.Helper()
	its, err := f.store.ListItems(context.Background(), redrive.ItemFilter{Key: key})
	if err != nil || len(its) != 1 {
		t.Fatalf("item %s: %v, %v", key, its, err)
	}
	return its[0]
}

// TestRetryNowAndCancelPending: retry now makes the waiting items of a
// filter due without touching their attempts, cancel pending cancels the
// pending items of a filter with the reason; both count first with a dry
// run, need the admin scope, and mark the items they changed with the
// audit log's action.
func TestRetryNowAndCancelPending(t *testing.T) {
	now := t0.Add(30 * time.Minute) // the docs run's 30 retries wait until t0+1h
	opts := scopedOptions()
	opts.Now = func() time.Time { return now }
	f := newFixture(t, opts)
	pending := []redrive.State{redrive.StatePending}
	waiting := redrive.ItemFilter{RunID: f.docsRun, States: pending, DueAfter: now}
	if n := f.count(t, waiting); n != 30 {
		t.Fatalf("fixture: %d waiting items, want 30", n)
	}
	docs := fmt.Sprint(f.docsRun)
	var resp struct {
		Count  int  `json:"count"`
		DryRun bool `json:"dry_run"`
	}

	// Without the admin scope nothing happens.
	f.send(t, "POST", "/api/v1/items/retry-now", submitToken, `{"run":`+docs+`}`).apiErr(t, http.StatusForbidden)
	f.send(t, "POST", "/api/v1/items/cancel", readToken, `{"run":`+docs+`}`).apiErr(t, http.StatusForbidden)

	f.send(t, "POST", "/api/v1/items/retry-now", adminToken, `{"run":`+docs+`,"dry_run":true}`).json(t, &resp)
	if resp.Count != 30 || !resp.DryRun || f.count(t, waiting) != 30 {
		t.Fatalf("retry now dry run = %+v, %d still waiting; want a count of 30 and no change", resp, f.count(t, waiting))
	}

	one := f.byKey(t, "docs-003")
	f.send(t, "POST", "/api/v1/items/retry-now", adminToken, `{"key":"docs-003"}`).json(t, &resp)
	if resp.Count != 1 {
		t.Fatalf("retry now of key docs-003 = %+v, want 1", resp)
	}
	d := f.detail(t, readToken, one.ID)
	if !d.Item.NextAt.Equal(now) || d.Item.Attempt != one.Attempt || d.Item.State != redrive.StatePending {
		t.Errorf("item after retry now: due %v attempt %d %s; want due %v, attempt %d, pending", d.Item.NextAt, d.Item.Attempt, d.Item.State, now, one.Attempt)
	}
	if len(d.Actions) != 1 || d.Actions[0].Kind != "retry_now" || d.Actions[0].Actor != "ops" || d.Actions[0].Count != 1 || d.Actions[0].Filter != "key=docs-003&state=pending" {
		t.Errorf("item actions after retry now = %+v", d.Actions)
	}
	f.send(t, "POST", "/api/v1/items/retry-now", adminToken, `{"run":`+docs+`}`).json(t, &resp)
	if resp.Count != 29 || f.count(t, waiting) != 0 {
		t.Errorf("retry now of the run = %+v, %d still waiting; want 29 and none", resp, f.count(t, waiting))
	}

	// Cancel pending: every pending item of pipeline mail, due or not.
	mail := redrive.ItemFilter{Pipeline: "mail", States: pending}
	f.send(t, "POST", "/api/v1/items/cancel", adminToken, `{"pipeline":"mail","dry_run":true}`).json(t, &resp)
	if resp.Count != 10 || f.count(t, mail) != 10 {
		t.Fatalf("cancel dry run = %+v", resp)
	}
	f.send(t, "POST", "/api/v1/items/cancel", adminToken, `{"pipeline":"mail","reason":"bad batch"}`).json(t, &resp)
	if resp.Count != 10 || f.count(t, mail) != 0 {
		t.Fatalf("cancel = %+v, %d still pending", resp, f.count(t, mail))
	}
	m := f.byKey(t, "mail-004")
	d = f.detail(t, readToken, m.ID)
	if d.Item.State != redrive.StateCanceled || d.Item.Reason == nil || d.Item.Reason.Error != "bad batch" || d.Item.Reason.Class != redrive.ClassCanceled {
		t.Errorf("canceled item = %+v", d.Item)
	}
	if len(d.Actions) != 1 || d.Actions[0].Kind != "cancel" || d.Actions[0].Count != 10 || d.Actions[0].Detail != "reason: bad batch" {
		t.Errorf("canceled item's actions = %+v", d.Actions)
	}
	if r, err := f.store.GetRun(context.Background(), f.mailRun); err != nil || r.Counts.Canceled != 10 || !r.Counts.AddsUp() {
		t.Errorf("mail run after the cancel: %+v, %v", r.Counts, err)
	}

	// Nothing to do: nothing is recorded.
	var before struct{ Data []redrive.AuditAction }
	f.send(t, "GET", "/api/v1/audit", readToken, "").json(t, &before)
	f.send(t, "POST", "/api/v1/items/cancel", adminToken, `{"pipeline":"mail"}`).json(t, &resp)
	var after struct{ Data []redrive.AuditAction }
	f.send(t, "GET", "/api/v1/audit", readToken, "").json(t, &after)
	if resp.Count != 0 || len(after.Data) != len(before.Data) || len(after.Data) != 3 {
		t.Errorf("a cancel of nothing = %+v; audit log %d entries, was %d, want 3", resp, len(after.Data), len(before.Data))
	}

	// Bad requests name their field.
	for _, c := range []struct{ path, body, field string }{
		{"/api/v1/items/cancel", `{}`, "all"},
		{"/api/v1/items/cancel", `{"states":["dead"]}`, "states"},
		{"/api/v1/items/retry-now", `{"key":"nope"}`, "key"},
		{"/api/v1/items/retry-now", `{"ids":[0]}`, "ids"},
		{"/api/v1/items/retry-now", `{"run":"x"}`, "run"},
		{"/api/v1/items/cancel", `{"pipeline":"mail","reasons":"x"}`, "reasons"},
	} {
		if _, field := f.send(t, "POST", c.path, adminToken, c.body).apiErr(t, http.StatusBadRequest); field != c.field {
			t.Errorf("POST %s %s: field %q, want %q", c.path, c.body, field, c.field)
		}
	}
}

// TestItemActionsOnOneItem: the write endpoints act on the IDs they are
// given, and the item's page lists who did what, oldest first.
func TestItemActionsOnOneItem(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	dead := f.byKey(t, "docs-000")
	other := f.byKey(t, "docs-004")
	body := fmt.Sprintf(`{"ids":[%d]}`, dead.ID)
	var resp struct{ Count int }
	f.post(t, "/api/v1/dlq/redrive", body).json(t, &resp)
	if resp.Count != 1 || f.detail(t, "", dead.ID).Item.State != redrive.StatePending || f.detail(t, "", other.ID).Item.State != redrive.StateDead {
		t.Fatalf("redrive of one item = %+v", resp)
	}
	f.post(t, "/api/v1/items/cancel", fmt.Sprintf(`{"ids":[%d],"reason":"not needed"}`, dead.ID)).json(t, &resp)
	if resp.Count != 1 {
		t.Fatalf("cancel of one item = %+v", resp)
	}
	d := f.detail(t, "", dead.ID)
	if len(d.Actions) != 2 || d.Actions[0].Kind != "redrive" || d.Actions[1].Kind != "cancel" || d.Actions[0].Actor != "default" ||
		d.Actions[0].Filter != fmt.Sprintf("ids=%d", dead.ID) {
		t.Errorf("actions of the item = %+v, want the redrive then the cancel", d.Actions)
	}
	if a := f.detail(t, "", other.ID).Actions; len(a) != 0 {
		t.Errorf("another item's actions = %+v, want none", a)
	}
}
