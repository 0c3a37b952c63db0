package web_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
	"github.com/redrive/redrive/web"
)

// evalInt evaluates a JavaScript expression that yields a number.
func evalInt(t *testing.T, ctx context.Context, expr string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return n
}

// pageText returns the text of the page's main element, for failures.
func pageText(ctx context.Context) string {
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("main").innerText`))
	if err != nil {
		return err.Error()
	}
	return s
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline (two busy cores).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBrowserViews drives the charts, workers and stages views in real
// Chromium at 1366×768 against a real engine: the run chart has one bar per
// bucket with attempts, the workers view shows the live client and the
// items it holds, and a stage paused from the UI (keyboard only) stops the
// engine working it until it is resumed, both recorded in the audit log.
func TestBrowserViews(t *testing.T) {
	bctx := browser(t)
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "redrive.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// Reads are open (no token has the read scope); writes need the admin
	// token named "ops".
	opts := web.Options{Tokens: []web.Token{{Name: "ops", Scopes: []web.Scope{web.ScopeAdmin}, Secret: adminToken}}, Now: time.Now}
	srv := httptest.NewServer(web.NewHandler(store, opts))
	t.Cleanup(srv.Close)
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1366, 768)); err != nil {
		t.Fatal(err)
	}

	// Charts: a run created half an hour ago, on minute boundaries, with
	// attempts in buckets 0 (two successes), 1 (a retry), 3 (a death) and
	// 10 (a success) of one minute each.
	start := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	hist := seedAttemptsAt(t, store, "hist", start,
		[]redrive.Outcome{redrive.OutcomeSucceeded, redrive.OutcomeSucceeded, redrive.OutcomeRetry, redrive.OutcomeDead, redrive.OutcomeSucceeded},
		[]time.Duration{5 * time.Second, 50 * time.Second, 61 * time.Second, 3 * time.Minute, 10*time.Minute + 30*time.Second})
	err = chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/#/runs/"+strconv.FormatInt(hist, 10)),
		textContains("main", "Attempts over time"),
		textContains("main", "Retries needed"),
	)
	if err != nil {
		t.Fatalf("run chart: %v (page: %q)", err, pageText(bctx))
	}
	if n := evalInt(t, bctx, `document.querySelectorAll("svg.chart").length`); n != 1 {
		t.Errorf("%d charts, want 1 (one stage)", n)
	}
	buckets, err := chromedp.Run(bctx, chromedp.Evaluate[string](`[...document.querySelectorAll("svg.chart g.bar")].map((g) => g.dataset.bucket).join(",")`))
	if err != nil || buckets != "0,1,3,10" {
		t.Errorf("bars at buckets %q, %v; want 0,1,3,10", buckets, err)
	}
	for sel, want := range map[string]int{"rect.seg-succeeded": 2, "rect.seg-retried": 1, "rect.seg-dead": 1, "rect.seg-waits": 0,
		"figure.stage-chart tbody tr": 4, "svg.chart > title": 1, "svg.chart > desc": 1} {
		if n := evalInt(t, bctx, `document.querySelectorAll("`+sel+`").length`); n != want {
			t.Errorf("%d %s, want %d", n, sel, want)
		}
	}
	// The tallest bar (two attempts) spans the plot; the others half of it.
	heights, err := chromedp.Run(bctx, chromedp.Evaluate[string](`[...document.querySelectorAll("svg.chart g.bar")].map((g) => Math.round([...g.querySelectorAll("rect")].reduce((a, r) => a + Number(r.getAttribute("height")), 0))).join(",")`))
	if err != nil || heights != "114,57,57,57" {
		t.Errorf("bar heights %q, %v; want 114,57,57,57", heights, err)
	}
	screenshot(t, bctx, "ui-run-chart")

	// A live client: docs items pass fetch and wait at parse until
	// released; mail items pass at once.
	release := make(chan struct{})
	client := redrive.NewClient(store, redrive.Config{Owner: "views-worker", Workers: 8, PollInterval: 20 * time.Millisecond,
		HeartbeatInterval: 200 * time.Millisecond, RunCheckInterval: 50 * time.Millisecond})
	pass := func(ctx context.Context, it *redrive.Item) ([]byte, error) { return it.Payload, nil }
	if err := client.Register(redrive.Pipeline{Name: "docs", Stages: []redrive.Stage{
		{Name: "fetch", Handle: pass},
		{Name: "parse", Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			select {
			case <-release:
				return it.Payload, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := client.Register(redrive.Pipeline{Name: "mail", Stages: []redrive.Stage{{Name: "fetch", Handle: pass}}}); err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		client.Stop(sctx)
	})
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})
	docs, err := client.StartRun(ctx, "docs", []redrive.NewItem{{Payload: []byte("1")}, {Payload: []byte("2")}, {Payload: []byte("3")}}, redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	atParse := func() bool {
		n, err := store.Count(ctx, redrive.ItemFilter{RunID: docs.ID, Stage: "parse", States: []redrive.State{redrive.StateRunning}})
		return err == nil && n == 3
	}
	waitFor(t, "three items running at parse", atParse)
	err = chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/#/workers"),
		textContains("#workers-total", "1 live worker"),
		textContains(`tr[data-owner="views-worker"]`, "live"),
		textContains(`tr[data-owner="views-worker"]`, "3 at docs / parse"),
	)
	if err != nil {
		t.Fatalf("workers view: %v", err)
	}
	if n := evalInt(t, bctx, `document.querySelectorAll('tr[data-owner="views-worker"] a[href^="#/items/"]').length`); n != 3 {
		t.Errorf("the worker's row links %d items, want 3", n)
	}
	if w := evalInt(t, bctx, `document.documentElement.scrollWidth`); w > 1366 {
		t.Errorf("the workers view is %d px wide at 1366", w)
	}
	screenshot(t, bctx, "ui-workers")
	close(release)
	released = true
	waitFor(t, "the docs run to finish", func() bool {
		r, err := store.GetRun(ctx, docs.ID)
		return err == nil && r.Counts.Succeeded == 3
	})

	// Pause mail/fetch from the stages view with the keyboard only.
	mail, err := client.StartRun(ctx, "mail", []redrive.NewItem{{Payload: []byte("m0")}}, redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first mail item", func() bool {
		r, err := store.GetRun(ctx, mail.ID)
		return err == nil && r.Counts.Succeeded == 1
	})
	pauseBtn := `button.stage-pause[data-pipeline="mail"][data-stage="fetch"]`
	steps := []struct {
		what string
		a    chromedp.Action[chromedp.Void]
	}{
		{"open the stages view", chromedp.Navigate(srv.URL + "/#/stages")},
		{"see the pause button", chromedp.WaitVisible(pauseBtn)},
		// docs/fetch holds no items now, but worked some this hour.
		{"see a stage passed through", textContains(`tr[data-pipeline="docs"][data-stage="fetch"]`, "active")},
		{"focus it", chromedp.Focus(pauseBtn)},
		{"press Enter", chromedp.KeyEvent("\r")},
		{"see the reason field", chromedp.WaitVisible("#pause-reason")},
		{"type the reason", chromedp.SendKeys("#pause-reason", "mail provider outage")},
		{"focus confirm", chromedp.Focus(`dialog button[value="confirm"]`)},
		{"press Enter", chromedp.KeyEvent("\r")},
		{"see the token field", chromedp.WaitVisible("#token-input")},
		{"type the token", chromedp.SendKeys("#token-input", adminToken)},
		{"focus use token", chromedp.Focus(`dialog button[value="ok"]`)},
		{"press Enter", chromedp.KeyEvent("\r")},
		{"see the status", textContains("#action-status", "Paused mail / fetch.")},
		{"see the pause", textContains(`tr[data-pipeline="mail"][data-stage="fetch"]`, "paused")},
		{"see who", textContains(`tr[data-pipeline="mail"][data-stage="fetch"]`, "ops")},
		{"see why", textContains(`tr[data-pipeline="mail"][data-stage="fetch"]`, "mail provider outage")},
	}
	for _, st := range steps {
		if err = chromedp.Do(bctx, st.a); err != nil {
			err = fmt.Errorf("%s: %w", st.what, err)
			break
		}
	}
	if err != nil {
		t.Fatalf("pause from the UI: %v (page: %q)", err, pageText(bctx))
	}
	if w := evalInt(t, bctx, `document.documentElement.scrollWidth`); w > 1366 {
		t.Errorf("the stages view is %d px wide at 1366", w)
	}
	screenshot(t, bctx, "ui-stages")
	ps, err := store.PausedStages(ctx)
	if err != nil || len(ps) != 1 {
		t.Fatalf("paused stages %+v, %v", ps, err)
	}

	// Every engine re-reads the pauses at least once a second: one second
	// after the pause, an item enqueued at the paused stage must wait while
	// one enqueued after it at a running stage is done. Without the pause
	// the earlier item would be claimed first.
	waitFor(t, "the engine's pause refresh", func() bool { return time.Since(ps[0].At) > 1500*time.Millisecond })
	heldRun, err := client.StartRun(ctx, "mail", []redrive.NewItem{{Payload: []byte("m1")}}, redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held, err := store.ListItems(ctx, redrive.ItemFilter{RunID: heldRun.ID})
	if err != nil || len(held) != 1 {
		t.Fatalf("the held item: %+v, %v", held, err)
	}
	canary, err := client.StartRun(ctx, "docs", []redrive.NewItem{{Payload: []byte("c")}}, redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "an item of a running stage", func() bool {
		r, err := store.GetRun(ctx, canary.ID)
		return err == nil && r.Counts.Succeeded == 1
	})
	if it, err := store.GetItem(ctx, held[0].ID); err != nil || it.State != redrive.StatePending || it.Attempt != 0 {
		t.Fatalf("the item of the paused stage: %+v, %v; want pending, never attempted", it, err)
	}

	// Resume from the UI: the engine works the stage again.
	resumeBtn := `button.stage-resume[data-pipeline="mail"][data-stage="fetch"]`
	err = chromedp.Do(bctx,
		chromedp.WaitVisible(resumeBtn),
		chromedp.Focus(resumeBtn),
		chromedp.KeyEvent("\r"),
		textContains("dialog", "Workers claim the items of mail / fetch again"),
		chromedp.Focus(`dialog button[value="confirm"]`),
		chromedp.KeyEvent("\r"),
		textContains("#action-status", "Resumed mail / fetch."),
		textContains(`tr[data-pipeline="mail"][data-stage="fetch"]`, "active"),
	)
	if err != nil {
		t.Fatalf("resume from the UI: %v (page: %q)", err, pageText(bctx))
	}
	waitFor(t, "the held item to be worked after the resume", func() bool {
		it, err := store.GetItem(ctx, held[0].ID)
		return err == nil && it.State == redrive.StateSucceeded
	})

	// Both actions are in the audit log, newest first, by the admin
	// token's name, linked to the stage.
	err = chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/#/audit"),
		textContains("tbody tr:nth-child(1)", "resume"),
		textContains("tbody tr:nth-child(1)", "stage mail / fetch"),
		textContains("tbody tr:nth-child(2)", "pause"),
		textContains("tbody tr:nth-child(2)", "ops"),
		textContains("tbody tr:nth-child(2)", "mail provider outage"),
	)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
}
