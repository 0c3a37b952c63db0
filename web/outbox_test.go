package web_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

type outboxPage struct {
	Data       []redrive.Notification     `json:"data"`
	NextCursor string                     `json:"next_cursor"`
	Totals     redrive.NotificationCounts `json:"totals"`
}

// TestOutboxAPI lists notifications with filters, pages and totals, and
// redrives dead ones over HTTP: admin scope only, dry_run changes nothing,
// the redrive is in the audit log, and callback URLs are listed without
// their query.
func TestOutboxAPI(t *testing.T) {
	f := newFixture(t, scopedOptions())
	ctx := context.Background()
	if err := f.store.Subscribe(ctx, "docs", []string{redrive.EventItemDead}, t0); err != nil {
		t.Fatal(err)
	}
	run, _, err := f.store.CreateRun(ctx, "docs", redrive.RunOptions{Name: "outbox"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	const cb = "https://app.example/cb?token=capability-7f3"
	items := []redrive.NewItem{{Invalid: "a", Callback: cb}, {Invalid: "b", Callback: cb}, {Invalid: "c", Callback: cb}, {Invalid: "d"}}
	if _, err := f.store.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "docs", Stage: "fetch", Items: items, Now: t0}); err != nil {
		t.Fatal(err)
	}
	// 4 webhook and 3 callback notifications; two of them given up.
	claimed, err := f.store.ClaimNotifications(ctx, redrive.ClaimRequest{Owner: "t", Pipelines: []string{"docs"}, Limit: 2, Now: t0, LeaseUntil: t0.Add(time.Minute)})
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim = %d, %v", len(claimed), err)
	}
	var rs []redrive.DeliveryResult
	for _, n := range claimed {
		rs = append(rs, redrive.DeliveryResult{ID: n.ID, Token: n.Token, Status: redrive.NotificationDead, Attempts: 1, Error: "410 Gone", Now: t0})
	}
	if _, err := f.store.SettleNotifications(ctx, rs); err != nil {
		t.Fatal(err)
	}

	get := func(target string) outboxPage {
		t.Helper()
		r := f.send(t, "GET", target, readToken, "")
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", target, r.code, r.body)
		}
		if bytes.Contains(r.body, []byte("capability-7f3")) {
			t.Errorf("GET %s shows a callback's query: %s", target, r.body)
		}
		var p outboxPage
		r.json(t, &p)
		return p
	}
	want := redrive.NotificationCounts{Pending: 5, Dead: 2, Total: 7}
	var all []redrive.Notification
	target := "/api/v1/outbox?limit=3"
	for pages := 0; ; pages++ {
		p := get(target)
		if p.Totals != want {
			t.Errorf("totals = %+v, want %+v", p.Totals, want)
		}
		all = append(all, p.Data...)
		if p.NextCursor == "" {
			if pages != 2 {
				t.Errorf("%d pages of 3 for 7 notifications", pages+1)
			}
			break
		}
		target = "/api/v1/outbox?limit=3&cursor=" + url.QueryEscape(p.NextCursor)
	}
	callbacks := 0
	for i, n := range all {
		if i > 0 && n.ID <= all[i-1].ID {
			t.Errorf("not in ID order: %d after %d", n.ID, all[i-1].ID)
		}
		if n.Callback != "" {
			callbacks++
			if n.Callback != "https://app.example/cb?redacted" {
				t.Errorf("callback listed as %q", n.Callback)
			}
		}
	}
	if len(all) != 7 || callbacks != 3 {
		t.Fatalf("listed %d notifications, %d callbacks; want 7 and 3", len(all), callbacks)
	}
	if p := get("/api/v1/outbox?state=dead"); len(p.Data) != 2 || p.Data[0].LastError != "410 Gone" {
		t.Errorf("dead = %+v", p.Data)
	}
	if p := get("/api/v1/outbox?pipeline=mail&event=item.dead"); len(p.Data) != 0 || p.Totals.Total != 0 {
		t.Errorf("mail = %+v", p)
	}
	for target, field := range map[string]string{
		"/api/v1/outbox?state=lost":        "state",
		"/api/v1/outbox?event=item.lost":   "event",
		"/api/v1/outbox?cursor=bogus":      "cursor",
		"/api/v1/outbox?state=dead&sort=x": "sort",
	} {
		if _, got := f.send(t, "GET", target, readToken, "").apiErr(t, http.StatusBadRequest); got != field {
			t.Errorf("GET %s: field %q, want %q", target, got, field)
		}
	}

	// Redrive: admin only; states other than dead refused; dry_run counts.
	f.send(t, "POST", "/api/v1/outbox/redrive", submitToken, `{}`).apiErr(t, http.StatusForbidden)
	if _, field := f.send(t, "POST", "/api/v1/outbox/redrive", adminToken, `{"states":["pending"]}`).apiErr(t, http.StatusBadRequest); field != "states" {
		t.Errorf("field = %q, want states", field)
	}
	var res struct {
		Count  int  `json:"count"`
		DryRun bool `json:"dry_run"`
	}
	r := f.send(t, "POST", "/api/v1/outbox/redrive", adminToken, `{"pipeline":"docs","dry_run":true}`)
	r.json(t, &res)
	if r.code != http.StatusOK || res.Count != 2 || !res.DryRun || get("/api/v1/outbox").Totals.Dead != 2 {
		t.Fatalf("dry run = %d %+v", r.code, res)
	}
	r = f.send(t, "POST", "/api/v1/outbox/redrive", adminToken, `{"pipeline":"docs","event":"item.dead"}`)
	r.json(t, &res)
	if r.code != http.StatusOK || res.Count != 2 || res.DryRun {
		t.Fatalf("redrive = %d %+v", r.code, res)
	}
	if got := get("/api/v1/outbox").Totals; got != (redrive.NotificationCounts{Pending: 7, Total: 7}) {
		t.Errorf("after redrive: %+v", got)
	}
	acts, err := f.store.ListActions(ctx, redrive.AuditFilter{Limit: 10})
	if err != nil || len(acts) != 1 || acts[0].Kind != "outbox_redrive" || acts[0].Count != 2 || acts[0].Actor != "ops" {
		t.Fatalf("audit log = %+v, %v", acts, err)
	}
}
