package web_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

// browser starts headless Chromium for one test. Without Chromium the test
// is skipped locally and fails in CI (CI set), where scripts/deps.sh
// installs it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("Chromium is missing: run scripts/deps.sh")
		}
		t.Skip("Chromium is missing: run scripts/deps.sh")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	}
	// Two busy cores: a generous deadline for the whole test.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return bctx
}

// textContains waits until the element sel's text contains want.
func textContains(sel, want string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](`(() => { const e = document.querySelector(`+quoteJS(sel)+`); return !!e && e.textContent.includes(`+quoteJS(want)+`); })()`,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))
}

// attrContains waits until the element matched by sel has an attribute
// containing want.
func attrContains(sel, attr, want string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](`(() => { const e = document.querySelector(`+quoteJS(sel)+`); return !!e && (e.getAttribute(`+quoteJS(attr)+`) || '').includes(`+quoteJS(want)+`); })()`,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))
}

// screenshot saves the page as docs/<name>.png when REDRIVE_SCREENSHOTS
// names the docs directory (how the screenshots in docs/ are made).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("REDRIVE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func quoteJS(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// TestBrowserConsole drives the dead-letter console in real Chromium:
// filter by stage and class, see the errors grouped by cause, dry-run and
// redrive with a rate, purge, export; a refused token changes nothing and a
// store failure never reaches the page.
func TestBrowserConsole(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, web.Options{Token: token, Now: time.Now})
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	dead := []redrive.State{redrive.StateDead}

	// Filter: the final deaths at stage fetch, one cause of 30 messages.
	err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/dlq?stage=fetch&class=final"),
		textContains("#dlq-total", "30 items match"),
		textContains("main", "corrupt document <n>"),
	)
	if err != nil {
		t.Fatalf("filtered dead letters: %v", err)
	}
	screenshot(t, ctx, "ui-dead-letters")

	// A wrong token is refused and asked for again; cancelling changes
	// nothing.
	err = chromedp.Do(ctx,
		chromedp.Click("#act-redrive"),
		chromedp.WaitVisible("#token-input"),
		chromedp.SendKeys("#token-input", "not-the-token"),
		chromedp.Click(`dialog button[value="ok"]`),
		textContains("dialog h2", "refused"),
		chromedp.Click(`dialog button[value="cancel"]`),
		chromedp.WaitNotPresent("dialog"),
	)
	if err != nil {
		t.Fatalf("wrong token: %v", err)
	}
	if n := f.count(t, redrive.ItemFilter{States: dead, Class: "final"}); n != 30 {
		t.Fatalf("after a refused token %d final dead items, want 30", n)
	}

	// Redrive with a rate: the dry run's count is confirmed first.
	err = chromedp.Do(ctx,
		chromedp.SetValue("#redrive-rate", "5"),
		chromedp.Click("#act-redrive"),
		chromedp.WaitVisible("#token-input"),
		chromedp.SendKeys("#token-input", token),
		chromedp.Click(`dialog button[value="ok"]`),
		textContains("dialog", "30 items go back to pending"),
		textContains("dialog", "5 per second"),
	)
	if err != nil {
		t.Fatalf("redrive dry run: %v", err)
	}
	if n := f.count(t, redrive.ItemFilter{States: dead, Class: "final"}); n != 30 {
		t.Fatalf("the dry run changed items: %d final dead, want 30", n)
	}
	err = chromedp.Do(ctx,
		chromedp.Click(`dialog button[value="confirm"]`),
		textContains("#action-status", "Redrive: 30 items."),
		textContains("#dlq-total", "0 items match"),
	)
	if err != nil {
		t.Fatalf("redrive: %v", err)
	}
	if n := f.count(t, redrive.ItemFilter{States: dead, Class: "final"}); n != 0 {
		t.Errorf("after the redrive %d final dead items, want 0", n)
	}
	pending, err := f.store.ListItems(context.Background(), redrive.ItemFilter{RunID: f.docsRun, States: []redrive.State{redrive.StatePending}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var first, last time.Time
	for _, it := range pending {
		if it.Attempt == 0 { // the redriven ones: a fresh attempt counter
			if first.IsZero() || it.NextAt.Before(first) {
				first = it.NextAt
			}
			if it.NextAt.After(last) {
				last = it.NextAt
			}
		}
	}
	if spread := last.Sub(first); spread < 5*time.Second || spread > 6*time.Second {
		t.Errorf("30 items at 5/s are due over %v, want 5.8 s", spread)
	}

	// Export the retryable deaths, then purge them; the token is kept.
	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/dlq?class=retryable"),
		textContains("#dlq-total", "30 items match"),
		// The previous view also matched 30 items: wait until the page
		// has been drawn for the new filter.
		attrContains("#act-export", "href", "class=retryable"),
	)
	if err != nil {
		t.Fatalf("retryable dead letters: %v", err)
	}
	attr, err := chromedp.Run(ctx, chromedp.AttributeValue("#act-export", "href"))
	if err != nil {
		t.Fatalf("export link: %v", err)
	}
	href := attr.Value
	res, err := http.Get(srv.URL + href)
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for sc := bufio.NewScanner(res.Body); sc.Scan(); {
		lines++
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || lines != 30 {
		t.Errorf("export %s: %s, %d lines, want 30", href, res.Status, lines)
	}
	err = chromedp.Do(ctx,
		chromedp.Click("#act-purge"),
		textContains("dialog", "cannot be undone"),
		chromedp.Click(`dialog button[value="confirm"]`),
		textContains("#action-status", "Purge: 30 items."),
		textContains("#dlq-total", "0 items match"),
	)
	if err != nil {
		t.Fatalf("purge: %v", err)
	}
	if r, err := f.store.GetRun(context.Background(), f.docsRun); err != nil || r.Counts.Purged != 30 || !r.Counts.AddsUp() {
		t.Errorf("run after the purge: %+v, %v", r.Counts, err)
	}

	// Both actions are in the audit log, newest first, their selection in
	// words.
	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/audit"),
		textContains("tbody tr:nth-child(1)", "purge"),
		textContains("tbody tr:nth-child(1)", "dead items · class retryable"),
		textContains("tbody tr:nth-child(1)", "30 items deleted"),
		textContains("tbody tr:nth-child(2)", "redrive"),
		textContains("tbody tr:nth-child(2)", "dead items · stage fetch · class final"),
		textContains("tbody tr:nth-child(2)", "rate 5/s"),
		textContains("tbody tr:nth-child(2)", "default"),
	)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}

	// A failing store: the page says what failed, never the store's words.
	f.store.Close()
	noRawStoreError(t, ctx, srv.URL+"/#/dlq?class=final")
}

// noRawStoreError opens url, whose view reads a store that fails, and
// checks that the page says an error happened without the store's words.
func noRawStoreError(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	err := chromedp.Do(ctx,
		chromedp.Navigate(url),
		textContains("main", "Error:"),
	)
	if err != nil {
		t.Fatalf("failing store: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text("main"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(text), "sqlite") || strings.Contains(text, "sql:") {
		t.Errorf("the page shows a raw store error: %q", text)
	}
}
