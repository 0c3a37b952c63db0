package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

// The tokens of a secured deployment: reads protected, as the README's
// service example sets them up (an application token that submits and
// reads), with a reader and an operator.
const (
	viewerSecret = "viewer-token-for-browser"
	appSecret    = "app-token-for-browser-01"
	opsSecret    = "ops-token-for-browser-01"
)

func securedOptions() web.Options {
	return web.Options{Now: time.Now, Tokens: []web.Token{
		{Name: "viewer", Secret: viewerSecret, Scopes: []web.Scope{web.ScopeRead}},
		{Name: "app", Secret: appSecret, Scopes: []web.Scope{web.ScopeSubmit, web.ScopeRead}},
		{Name: "ops", Secret: opsSecret, Scopes: []web.Scope{web.ScopeAdmin}},
	}}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// poll waits until the JavaScript expression cond is true.
func poll(cond string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))
}

// focusedJS describes the focused element, for assertions and failures.
const focusedJS = `(() => { const a = document.activeElement; return a ? a.tagName + (a.id ? "#" + a.id : "") + (a.getAttribute("aria-label") ? "[" + a.getAttribute("aria-label") + "]" : "") + (a.value ? "=" + a.value : "") : "none"; })()`

// tabTo presses Tab until the element matching sel has the focus, as a
// keyboard user reaches it (at most max presses).
func tabTo(t *testing.T, ctx context.Context, sel string, max int) {
	t.Helper()
	for range max {
		if eval[bool](t, ctx, `document.activeElement === document.querySelector(`+quoteJS(sel)+`)`) {
			return
		}
		if err := chromedp.Do(ctx, chromedp.KeyEvent("\t")); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("%d Tab presses did not reach %s (focus on %s)", max, sel, eval[string](t, ctx, focusedJS))
}

// waitRefreshes waits until the page has applied n more refreshes of its
// view (it counts them in window.redriveRefreshes).
func waitRefreshes(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	from := eval[int](t, ctx, `window.redriveRefreshes`)
	if err := chromedp.Do(ctx, poll(fmt.Sprintf(`window.redriveRefreshes >= %d`, from+n))); err != nil {
		t.Fatalf("waiting for %d refreshes after %d: %v", n, from, err)
	}
}

// TestBrowserProtectedReads drives a deployment whose reads need a token,
// in real Chromium: every view asks for a token (focused, kept in the tab's
// sessionStorage only) instead of failing; an unknown token and one without
// the read scope are refused with a reason; the header says which scopes
// the kept token has; an action asks for the admin scope only then, refuses
// a token without it (as the API does), and works with a second token that
// has it; Forget drops both.
func TestBrowserProtectedReads(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, securedOptions())
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}

	// Before: "Error: missing bearer token" and no way out.
	err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/dlq?class=final"),
		textContains("h1", "A token is needed to read"),
		textContains("#identity", "No token: reads need one"),
		poll(`document.activeElement.id === "read-token-input"`),
	)
	if err != nil {
		t.Fatalf("token prompt: %v (page: %q)", err, pageText(ctx))
	}
	screenshot(t, ctx, "ui-token")
	// Keyboard only: type, Enter.
	err = chromedp.Do(ctx,
		chromedp.KeyEvent("no-such-token-0123456789\r"),
		textContains("#read-token-error", "does not know that token"),
		// The refused token is selected: typing replaces it.
		chromedp.KeyEvent(opsSecret+"\r"),
		textContains("#read-token-error", "grants admin, not read"),
		chromedp.KeyEvent(appSecret+"\r"),
		textContains("#dlq-total", "30 items match"),
		textContains("#identity", "app (submit, read)"),
		textContains("#identity", "ops (admin)"),
	)
	if err != nil {
		t.Fatalf("enter a token: %v (page: %q)", err, pageText(ctx))
	}
	if got := eval[string](t, ctx, `JSON.stringify([localStorage.length, document.cookie])`); got != `[0,""]` {
		t.Errorf("the token leaked out of sessionStorage: localStorage and cookies %s", got)
	}
	if !eval[bool](t, ctx, `sessionStorage.getItem("redrive-tokens").includes(`+quoteJS(appSecret)+`)`) {
		t.Error("the token is not in sessionStorage")
	}
	// Every view reads with it.
	for _, v := range []struct{ hash, want string }{
		{"#/", "Runs"}, {"#/audit", "Audit log"}, {"#/stages", "Stages"}, {"#/workers", "Workers"},
		{fmt.Sprintf("#/runs/%d", f.docsRun), "Attempts over time"}, {"#/dlq?state=pending&pipeline=docs", "30 items match"},
	} {
		err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"+v.hash), textContains("main", v.want))
		if err != nil {
			t.Fatalf("view %s: %v (page: %q)", v.hash, err, pageText(ctx))
		}
		if strings.Contains(pageText(ctx), "Error:") {
			t.Errorf("view %s: %q", v.hash, pageText(ctx))
		}
	}

	// The API refuses an action with a read token...
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/dlq/redrive", strings.NewReader(`{"class":"final"}`))
	req.Header.Set("Authorization", "Bearer "+appSecret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("redrive with the app token: %s, want 403", res.Status)
	}
	// ...and so does the page: the admin token kept above is forgotten,
	// the read token is refused for the action, nothing changes.
	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/dlq?class=final"),
		textContains("#dlq-total", "30 items match"),
		chromedp.Evaluate[chromedp.Void](`sessionStorage.setItem("redrive-tokens", JSON.stringify(JSON.parse(sessionStorage.getItem("redrive-tokens")).filter((t) => t.name !== "ops")))`),
		chromedp.Click("#act-redrive"),
		chromedp.WaitVisible("#token-input"),
		textContains("dialog", "needs a token with the admin scope"),
		textContains("dialog", "app (submit, read)"),
		chromedp.SendKeys("#token-input", viewerSecret+"\r"),
		textContains("dialog h2", "Token viewer lacks the admin scope"),
		chromedp.Click(`dialog button[value="cancel"]`),
		textContains("#action-status", "Nothing changed"),
	)
	if err != nil {
		t.Fatalf("action with a read token: %v (page: %q)", err, pageText(ctx))
	}
	if n := f.count(t, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}, Class: "final"}); n != 30 {
		t.Fatalf("a refused action changed items: %d final dead, want 30", n)
	}
	// With the operator's token it goes through, recorded under its name.
	err = chromedp.Do(ctx,
		chromedp.Click("#act-redrive"),
		chromedp.WaitVisible("#token-input"),
		chromedp.SendKeys("#token-input", opsSecret+"\r"),
		textContains("dialog", "30 items go back to pending"),
		chromedp.Click(`dialog button[value="confirm"]`),
		textContains("#action-status", "Redrive: 30 items."),
	)
	if err != nil {
		t.Fatalf("action with the admin token: %v (page: %q)", err, pageText(ctx))
	}
	acts, err := f.store.ListActions(t.Context(), redrive.AuditFilter{})
	if err != nil || len(acts) != 1 || acts[0].Actor != "ops" || acts[0].Count != 30 {
		t.Fatalf("audit log %+v, %v; want the redrive by ops", acts, err)
	}
	// A reload keeps the tab's tokens; Forget drops them.
	err = chromedp.Do(ctx,
		chromedp.Reload(),
		textContains("#identity", "app (submit, read)"),
		textContains("main", "items match"),
		chromedp.Click("#forget-tokens"),
		textContains("h1", "A token is needed to read"),
	)
	if err != nil {
		t.Fatalf("reload and forget: %v (page: %q)", err, pageText(ctx))
	}
	if got := eval[bool](t, ctx, `sessionStorage.getItem("redrive-tokens") === null`); !got {
		t.Error("Forget left tokens in sessionStorage")
	}
}

// TestBrowserRefreshKeepsFocus: the view refreshes without taking away what
// the operator is using: a button reached with Tab keeps the focus (the very
// element, not a copy) across two refreshes that change the numbers around
// it, and still acts on what the view shows now.
func TestBrowserRefreshKeepsFocus(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, web.Options{Token: token, Now: time.Now})
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	pause := `button[aria-label="Pause mail / fetch"]`
	mailRow := `tr[data-pipeline="mail"][data-stage="fetch"]`
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/#/stages"), textContains(mailRow, "10")); err != nil {
		t.Fatalf("stages view: %v", err)
	}
	tabTo(t, ctx, pause, 60)
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.activeElement.redriveMark = "kept"`)); err != nil {
		t.Fatal(err)
	}
	// Five more mail items: the row's counts change under the focus.
	items := make([]redrive.NewItem, 5)
	for i := range items {
		items[i].Payload = []byte(`{}`)
	}
	if _, err := f.store.Enqueue(t.Context(), redrive.EnqueueRequest{RunID: f.mailRun, Pipeline: "mail", Stage: "fetch", Items: items, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitRefreshes(t, ctx, 2)
	if err := chromedp.Do(ctx, textContains(mailRow, "15")); err != nil {
		t.Fatalf("the refresh did not show the new items: %v (page: %q)", err, pageText(ctx))
	}
	if got := eval[string](t, ctx, focusedJS); got != "BUTTON[Pause mail / fetch]" {
		t.Fatalf("after two refreshes the focus is on %s, want the pause button", got)
	}
	if !eval[bool](t, ctx, `document.activeElement.redriveMark === "kept"`) {
		t.Error("the focused button was rebuilt by the refresh")
	}
	// Enter on it pauses this stage, with the counts the view shows now.
	err := chromedp.Do(ctx,
		chromedp.KeyEvent("\r"),
		textContains("dialog", "Every worker process stops claiming items of mail / fetch"),
		textContains("dialog", "15 pending items wait"),
		poll(`document.activeElement.id === "pause-reason"`),
		chromedp.KeyEvent("\x1b"),
		chromedp.WaitNotPresent("dialog"),
		textContains("#action-status", "Nothing changed."),
	)
	if err != nil {
		t.Fatalf("pause dialog: %v (page: %q)", err, pageText(ctx))
	}
}

// TestBrowserKeyboardWalk walks the main flows with the keyboard only, as
// docs/ui.md records them: filter from the form's fields (the focus stays
// in the field), dry-run a redrive, whose confirmation opens on "Do
// nothing" and states the action, the selection and the count (Enter there
// changes nothing), confirm it, see its result line stay through the
// refreshes that follow, and pause a stage with a reason.
func TestBrowserKeyboardWalk(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, web.Options{Token: token, Now: time.Now})
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
	key := func(what string, a ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, a...); err != nil {
			t.Fatalf("%s: %v (focus on %s; page: %q)", what, err, eval[string](t, ctx, focusedJS), pageText(ctx))
		}
	}

	// 1. Filter: Tab to Stage, type, Tab to Class, type, Enter.
	key("open the dead letters", chromedp.Navigate(srv.URL+"/#/dlq"), textContains("#dlq-total", "60 items match"))
	tabTo(t, ctx, "#filter-stage", 40)
	key("type the stage", chromedp.KeyEvent("fetch"))
	tabTo(t, ctx, "#filter-class", 5)
	key("type the class and Enter", chromedp.KeyEvent("final\r"), textContains("#dlq-total", "30 items match"),
		poll(`location.hash === "#/dlq?stage=fetch&class=final"`))
	if got := eval[string](t, ctx, focusedJS); got != "INPUT#filter-class=final" {
		t.Errorf("after filtering the focus is on %s, want the class field", got)
	}
	screenshot(t, ctx, "ui-keyboard-filter")

	// 2. Dry run: Tab to Redrive…, Enter; the token dialog has the focus.
	tabTo(t, ctx, "#act-redrive", 20)
	key("dry run", chromedp.KeyEvent("\r"), poll(`document.activeElement.id === "token-input"`),
		chromedp.KeyEvent(token+"\r"), textContains("#confirm-count", "30 items"))

	// 3. The confirmation opens on Do nothing and says what, which and how
	// many; Enter there changes nothing.
	if got := eval[string](t, ctx, focusedJS); got != "BUTTON=cancel" {
		t.Fatalf("the confirmation opens with the focus on %s, want Do nothing", got)
	}
	key("the confirmation's words", textContains("#confirm-action", "30 items go back to pending at the stage they stopped at, all due now."),
		textContains("#confirm-selection", "dead items · stage fetch · class final"),
		textContains("#confirm-count", "30 items, counted by a dry run just now"))
	screenshot(t, ctx, "ui-confirm-redrive")
	key("Enter on Do nothing", chromedp.KeyEvent("\r"), chromedp.WaitNotPresent("dialog"), textContains("#action-status", "Nothing changed."))
	if n := f.count(t, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}, Class: "final"}); n != 30 {
		t.Fatalf("Enter on the confirmation changed items: %d final dead, want 30", n)
	}
	if got := eval[string](t, ctx, focusedJS); got != "BUTTON#act-redrive" {
		t.Errorf("after the dialog the focus is on %s, want back on Redrive…", got)
	}

	// 4. Confirm: Enter, Tab to the confirm button, Enter.
	key("confirm", chromedp.KeyEvent("\r"), textContains("#confirm-count", "30 items"),
		chromedp.KeyEvent("\t"), poll(`document.activeElement.value === "confirm"`),
		chromedp.KeyEvent("\r"), textContains("#action-status", "Redrive: 30 items."), textContains("#dlq-total", "0 items match"))
	if n := f.count(t, redrive.ItemFilter{States: []redrive.State{redrive.StateDead}, Class: "final"}); n != 0 {
		t.Fatalf("after the redrive %d final dead items, want 0", n)
	}
	// The result stays through the refreshes that follow, and so does the
	// focus.
	waitRefreshes(t, ctx, 2)
	if got := eval[string](t, ctx, `document.getElementById("action-status").textContent`); got != "Redrive: 30 items." {
		t.Errorf("after two refreshes the result line reads %q", got)
	}
	if got := eval[string](t, ctx, focusedJS); got != "BUTTON#act-redrive" {
		t.Errorf("after the redrive and two refreshes the focus is on %s, want the redrive button", got)
	}

	// 5. Pause a stage: Tab to its button, Enter, type the reason, Tab
	// past Do nothing to the pause button, Enter.
	key("open the stages", chromedp.Navigate(srv.URL+"/#/stages"), chromedp.WaitVisible(`button[aria-label="Pause mail / fetch"]`))
	tabTo(t, ctx, `button[aria-label="Pause mail / fetch"]`, 60)
	key("pause", chromedp.KeyEvent("\r"), poll(`document.activeElement.id === "pause-reason"`),
		chromedp.KeyEvent("mail provider outage\r"), // Enter in the reason does nothing
		chromedp.KeyEvent("\t"), poll(`document.activeElement.value === "cancel"`),
		chromedp.KeyEvent("\t"), poll(`document.activeElement.value === "confirm"`),
		chromedp.KeyEvent("\r"), textContains("#action-status", "Paused mail / fetch."),
		textContains(`tr[data-pipeline="mail"][data-stage="fetch"]`, "mail provider outage"))
	if got := eval[string](t, ctx, focusedJS); got != "BUTTON[Resume mail / fetch]" {
		t.Errorf("after the pause the focus is on %s, want the stage's button, now Resume", got)
	}
}

// TestBrowserAuditLog: at 1280×800 the audit log fits the window with long
// filters and names; each entry links to exactly the items its action
// changed, which still opens them once they moved on; an unknown cause in
// the URL is an error naming the field, not "0 items match".
func TestBrowserAuditLog(t *testing.T) {
	ctx := browser(t)
	opts := web.Options{Token: token, Now: time.Now, ActorHeader: "X-Forwarded-User"}
	f := newFixture(t, opts)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
	post := func(path, body, who string) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-User", who)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %s", path, res.Status)
		}
	}
	// A redrive of 7 of the 30 "corrupt document" deaths by a person with
	// a long name, through the proxy; then a cancel with a long reason.
	post("/api/v1/dlq/redrive", `{"fingerprint":"corrupt document <n>","error_contains":"corrupt document","stage":"fetch","class":"final","limit":7,"rate":2.5}`,
		"margaret.hamilton-of-the-apollo-guidance-software-team@example.com")
	post("/api/v1/items/cancel", `{"pipeline":"mail","reason":"`+strings.Repeat("wrong batch sent by the nightly import job; ", 6)+`"}`, "alice")
	acts, err := f.store.ListActions(t.Context(), redrive.AuditFilter{})
	if err != nil || len(acts) != 2 {
		t.Fatalf("audit log %+v, %v", acts, err)
	}
	redriveID := acts[1].ID

	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/audit"),
		textContains("tbody tr:nth-child(1)", "alice"),
		textContains("tbody tr:nth-child(1)", "pending items · pipeline mail"),
		textContains("tbody tr:nth-child(2)", "margaret.hamilton"),
		textContains("tbody tr:nth-child(2)", "dead items · stage fetch · class final · error containing “corrupt document” · cause “corrupt document <n>” · at most 7"),
	)
	if err != nil {
		t.Fatalf("audit log: %v (page: %q)", err, pageText(ctx))
	}
	if w := evalInt(t, ctx, `document.documentElement.scrollWidth`); w > 1280 {
		t.Errorf("the audit log is %d px wide in a 1280 px window", w)
	}
	screenshot(t, ctx, "ui-audit-log")

	// The entry's items link opens exactly the 7 redriven items, now
	// pending.
	err = chromedp.Do(ctx,
		chromedp.Click(`a[href="#/dlq?action=`+strconv.FormatInt(redriveID, 10)+`"]`),
		textContains("h1", "Items changed by audit entry #"+strconv.FormatInt(redriveID, 10)),
		textContains("#dlq-total", "7 items match"),
	)
	if err != nil {
		t.Fatalf("items of the redrive: %v (page: %q)", err, pageText(ctx))
	}
	if n := evalInt(t, ctx, `[...document.querySelectorAll("table:last-of-type tbody tr")].filter((r) => r.textContent.includes("pending")).length`); n != 7 {
		t.Errorf("%d pending rows listed for the redrive's entry, want 7 (page: %q)", n, pageText(ctx))
	}

	// Unknown values of a filter are errors naming the field, with the
	// filter form kept to fix them.
	for _, c := range []struct{ hash, want string }{
		{"#/dlq?fingerprint=no+such+cause", `Error: Cause: unknown cause "no such cause"`},
		{"#/dlq?class=fnal", `Error: Class: unknown class "fnal"`},
		{"#/dlq?state=zombie", "Error: State: unknown state"},
		{"#/dlq?stage=nope", `Error: Stage: unknown stage "nope"`},
		{"#/dlq?action=999", "Error: Audit entry: unknown audit entry 999"},
		{"#/dlq?colour=red", "Error: unknown filter colour"},
	} {
		err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"+c.hash), textContains("#filter-error", c.want), chromedp.WaitVisible("#filters"))
		if err != nil {
			t.Errorf("%s: %v (page: %q)", c.hash, err, pageText(ctx))
		}
		if strings.Contains(pageText(ctx), "items match") {
			t.Errorf("%s shows a count: %q", c.hash, pageText(ctx))
		}
	}
}
