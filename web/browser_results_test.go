package web_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

// TestBrowserItemBytes opens item pages in the console: a JSON input and
// output show as JSON, an output that is not JSON as its text.
func TestBrowserItemBytes(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, web.Options{})
	run := resultsRun(t, f, 3)
	items, err := f.store.ListItems(context.Background(), redrive.ItemFilter{RunID: run})
	if err != nil || len(items) != 3 {
		t.Fatalf("items: %d, %v", len(items), err)
	}
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	err = chromedp.Do(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/items/%d", srv.URL, items[0].ID)),
		textContains("main", `"doc": 0`),
		textContains("main", `"n": 0`),
		chromedp.Navigate(fmt.Sprintf("%s/#/items/%d", srv.URL, items[1].ID)),
		textContains("main", `"doc": 1`),
		textContains("main", "line 1"),
	)
	if err != nil {
		t.Fatalf("item pages: %v", err)
	}
}
