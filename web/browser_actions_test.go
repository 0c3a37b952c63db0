package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

// waitingRun seeds a run of pipeline p with n items that failed their
// first attempt and wait an hour for the next.
func waitingRun(t *testing.T, f *fixture, p string, n int) int64 {
	t.Helper()
	retryAt := time.Now().Add(time.Hour)
	return seedRun(t, f.store, p, n, func(i int, l redrive.Lease) redrive.Completion {
		return redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StatePending, Stage: "fetch", Attempt: 1,
			NextAt: retryAt, Now: t0,
			Record: redrive.Attempt{Stage: "fetch", Number: 1, Outcome: redrive.OutcomeRetry, Class: "retryable",
				Error: "503 from api", StartedAt: t0, FinishedAt: t0, Delay: time.Hour}}
	})
}

// TestBrowserActions drives the pending items' actions and the item page
// in real Chromium: a token without the admin scope is refused (API 403;
// the page names what it lacks and asks for another) and changes nothing; cancel pending shows its dry-run
// count before it changes anything; retry now makes waiting items due
// with their attempts kept; a per-item redrive and purge; the audit marks on the
// items' timelines; pages both ways; and no raw store error on a page.
func TestBrowserActions(t *testing.T) {
	ctx := browser(t)
	const admin, submitter = "admin-token-for-browser", "submit-token-for-browser"
	f := newFixture(t, web.Options{Now: time.Now, Tokens: []web.Token{
		{Name: "ops", Secret: admin, Scopes: []web.Scope{web.ScopeAdmin}},
		{Name: "app", Secret: submitter, Scopes: []web.Scope{web.ScopeSubmit}},
	}})
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	bg := context.Background()
	waitRun := waitingRun(t, f, "wait", 12)
	cancelRun := waitingRun(t, f, "batch", 8)
	pending := []redrive.State{redrive.StatePending}
	waiting := func() int {
		return f.count(t, redrive.ItemFilter{Pipeline: "wait", States: pending, DueAfter: time.Now()})
	}

	// The API refuses a token without the admin scope.
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/items/retry-now", strings.NewReader(`{"pipeline":"wait"}`))
	req.Header.Set("Authorization", "Bearer "+submitter)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("retry now with a submit token: %s, want 403", res.Status)
	}

	// So does the page: it says the token lacks the admin scope, asks for
	// another, and nothing changes when none is given.
	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/dlq?state=pending&pipeline=wait"),
		textContains("#dlq-total", "12 items match"),
		chromedp.Click("#act-retry-now"),
		chromedp.WaitVisible("#token-input"),
		chromedp.SendKeys("#token-input", submitter),
		chromedp.Click(`dialog button[value="ok"]`),
		textContains("dialog h2", "Token app lacks the admin scope"),
		textContains("dialog", "grants submit"),
		chromedp.Click(`dialog button[value="cancel"]`),
		textContains("#action-status", "Nothing changed"),
		textContains("#action-status", "admin"),
	)
	if err != nil {
		t.Fatalf("retry now with a submit token: %v", err)
	}
	if n := waiting(); n != 12 {
		t.Fatalf("after a refused retry now %d items wait, want 12", n)
	}

	// Cancel pending on a run: the dry run's count first, nothing changed
	// until it is confirmed.
	err = chromedp.Do(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/dlq?state=pending&run=%d", srv.URL, cancelRun)),
		textContains("#dlq-total", "8 items match"),
		chromedp.SendKeys("#cancel-reason", "wrong input file"),
		chromedp.Click("#act-cancel"),
		chromedp.WaitVisible("#token-input"),
		chromedp.SendKeys("#token-input", admin),
		chromedp.Click(`dialog button[value="ok"]`),
		textContains("dialog", "8 items are canceled with the reason “wrong input file”"),
	)
	if err != nil {
		t.Fatalf("cancel dry run: %v", err)
	}
	if n := f.count(t, redrive.ItemFilter{RunID: cancelRun, States: pending}); n != 8 {
		t.Fatalf("the dry run changed items: %d pending, want 8", n)
	}
	err = chromedp.Do(ctx,
		chromedp.Click(`dialog button[value="confirm"]`),
		textContains("#action-status", "Cancel: 8 items."),
		textContains("#dlq-total", "0 items match"),
	)
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	canceled, err := f.store.ListItems(bg, redrive.ItemFilter{RunID: cancelRun, States: []redrive.State{redrive.StateCanceled}})
	if err != nil || len(canceled) != 8 || canceled[0].Reason == nil || canceled[0].Reason.Error != "wrong input file" {
		t.Fatalf("canceled items: %d, %v (first %+v)", len(canceled), err, canceled)
	}

	// Retry now: the waiting items become due, their attempts kept.
	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/dlq?state=pending&pipeline=wait"),
		textContains("#dlq-total", "12 items match"),
		chromedp.Click("#act-retry-now"),
		textContains("dialog", "12 items waiting on a backoff become due now"),
		chromedp.Click(`dialog button[value="confirm"]`),
		textContains("#action-status", "Retry now: 12 items."),
	)
	if err != nil {
		t.Fatalf("retry now: %v", err)
	}
	retried, err := f.store.ListItems(bg, redrive.ItemFilter{RunID: waitRun})
	if err != nil || len(retried) != 12 {
		t.Fatal(len(retried), err)
	}
	for _, it := range retried {
		if it.State != redrive.StatePending || it.NextAt.After(time.Now()) || it.Attempt != 1 {
			t.Fatalf("item %d after retry now: %s, due %v, attempt %d; want pending, due, attempt 1", it.ID, it.State, it.NextAt, it.Attempt)
		}
	}

	// The marks on the items' timelines.
	err = chromedp.Do(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/items/%d", srv.URL, retried[3].ID)),
		textContains("#timeline", "Retried now by ops at"),
		textContains("#timeline", "503 from api"),
		chromedp.Navigate(fmt.Sprintf("%s/#/items/%d", srv.URL, canceled[5].ID)),
		textContains("#timeline", "Canceled by ops at"),
		textContains("#timeline", "reason: wrong input file"),
	)
	if err != nil {
		t.Fatalf("audit marks: %v", err)
	}

	// A per-item action: redrive one dead item from its page.
	dead := f.byKey(t, "docs-004")
	err = chromedp.Do(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/items/%d", srv.URL, dead.ID)),
		textContains("main", "Reason: final"),
		chromedp.Click("#item-redrive"),
		textContains("dialog", fmt.Sprintf("Item #%d goes back to pending at stage fetch", dead.ID)),
		chromedp.Click(`dialog button[value="confirm"]`),
		textContains("#action-status", "Redrive: 1 item."),
		textContains("h1", "pending"),
		textContains("#timeline", "Redriven by ops at"),
	)
	if err != nil {
		t.Fatalf("redrive one item: %v", err)
	}
	screenshot(t, ctx, "ui-item-actions")
	if it := f.byKey(t, "docs-004"); it.State != redrive.StatePending {
		t.Errorf("redriven item is %s, want pending", it.State)
	}
	if n := f.count(t, redrive.ItemFilter{RunID: f.docsRun, States: []redrive.State{redrive.StateDead}}); n != 59 {
		t.Errorf("%d dead items of the docs run, want 59: the redrive of one item changed others", n)
	}

	// Purge one item from its page: the console goes to its run.
	gone := f.byKey(t, "docs-008")
	err = chromedp.Do(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/items/%d", srv.URL, gone.ID)),
		textContains("main", "Reason: final"),
		chromedp.Click("#item-purge"),
		textContains("dialog", "cannot be undone"),
		chromedp.Click(`dialog button[value="confirm"]`),
		textContains("h1", fmt.Sprintf("Run #%d", f.docsRun)),
	)
	if err != nil {
		t.Fatalf("purge one item: %v", err)
	}
	if _, err := f.store.GetItem(bg, gone.ID); err == nil {
		t.Errorf("item %d still exists after its purge", gone.ID)
	}

	// Pages both ways: 58 dead items, 50 on a page.
	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/dlq?pipeline=docs"),
		textContains("#dlq-total", "showing 50 on this page"),
		chromedp.Click("#next-page"),
		textContains("#dlq-total", "showing 8 on this page"),
		chromedp.Click("#prev-page"),
		textContains("#dlq-total", "showing 50 on this page"),
		chromedp.WaitNotPresent("#prev-page"),
	)
	if err != nil {
		t.Fatalf("pages both ways: %v", err)
	}

	// Unknown filter values and a failing store: the page says what is
	// wrong, never the store's words.
	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/dlq?state=pending&key=no-such-key"),
		textContains("main", `unknown key "no-such-key"`),
	)
	if err != nil {
		t.Fatalf("unknown key: %v", err)
	}
	f.store.Close()
	noRawStoreError(t, ctx, fmt.Sprintf("%s/#/items/%d", srv.URL, dead.ID))
}
