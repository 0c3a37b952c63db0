package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
)

// TestItemsShowActionsAndKey: `items show` lists the audit log's actions
// that changed the item (as the console marks them), in text and JSON;
// --key selects one item, and an unknown key is a usage error.
func TestItemsShowActionsAndKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "redrive.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	f := seed(t, s)
	f.db = "sqlite:" + path
	ctx := context.Background()
	id, err := s.RecordAction(ctx, redrive.AuditAction{At: time.Now().UTC(), Actor: "ops", Kind: "redrive", Filter: "key=d", Count: 1, Detail: "rate 5/s"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.MarkItems(ctx, id, redrive.ItemFilter{Key: "d"}); err != nil || n != 1 {
		t.Fatalf("MarkItems = %d, %v", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r := mustRun(t, 0, f.args("items", "show", strconv.FormatInt(f.ids["d"], 10))...)
	wantContains(t, "items show d", r.stdout, "Actions (1):", "ops", "redrive", "rate 5/s")
	if r := mustRun(t, 0, f.args("items", "show", strconv.FormatInt(f.ids["e"], 10))...); strings.Contains(r.stdout, "Actions (") {
		t.Errorf("items show e lists actions of another item:\n%s", r.stdout)
	}
	var d itemDetail
	decodeJSON(t, mustRun(t, 0, f.args("items", "show", strconv.FormatInt(f.ids["d"], 10), "--json")...), &d)
	if len(d.Actions) != 1 || d.Actions[0].ID != id || d.Actions[0].Kind != "redrive" {
		t.Errorf("items show --json actions = %+v", d.Actions)
	}

	var items []redrive.Item
	decodeJSON(t, mustRun(t, 0, f.args("dlq", "list", "--key", "d", "--json")...), &items)
	if len(items) != 1 || items[0].ID != f.ids["d"] {
		t.Errorf("dlq list --key d = %+v", items)
	}
	r = mustRun(t, 2, f.args("items", "list", "--key", "no-such-key")...)
	wantContains(t, "items list --key no-such-key", r.stderr, `unknown key "no-such-key"`)
}
