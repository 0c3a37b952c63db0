package web_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redrive/redrive/web"
)

// TestBrowserGroupLink: "Show dead items" of an error group narrows the
// dead-letter view to that group through its fingerprint, whatever its
// messages, so the actions then select exactly the group.
func TestBrowserGroupLink(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, web.Options{Token: token, Now: time.Now})
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/dlq?class=retryable"),
		textContains("main", "timeout talking to api"),
		chromedp.Click(`a[href*="fingerprint="]`),
		// The filter before the click has the same total: wait for the
		// view of the link's filter first.
		chromedp.Poll[chromedp.Void](`(() => { const e = document.querySelector('input[name="fingerprint"]'); return !!e && e.value !== ''; })()`,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second)),
		textContains("#dlq-total", "30 items match"),
	)
	if err != nil {
		t.Fatalf("group link: %v", err)
	}
	loc, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash`))
	if err != nil {
		t.Fatal(err)
	}
	cause, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('input[name="fingerprint"]').value`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(loc, "fingerprint=timeout+talking+to+api") || strings.Contains(loc, "error_contains") {
		t.Errorf("group link went to %s, want the fingerprint filter", loc)
	}
	if cause != "timeout talking to api" {
		t.Errorf("cause filter field = %q", cause)
	}
}
