package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redrive/redrive"
)

// TestPurgedItemsCounted checks that `runs list` and `stats` show the items
// purged from the dead-letter queue, so that their counts add up to the
// total: they used to leave them out while counting them in TOTAL (runs) or
// dropping them altogether (stats).
func TestPurgedItemsCounted(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	// d and e are the final dead items of run1 (ocr).
	r := mustRun(t, 0, f.args("dlq", "purge", "--class", "final", "--pipeline", "ocr", "--yes")...)
	wantContains(t, "purge", r.stdout, "purged 2 items")

	r = mustRun(t, 0, f.args("runs", "list")...)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	header := strings.Fields(lines[0])
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	if _, ok := col["PURGED"]; !ok {
		t.Fatalf("runs list has no PURGED column:\n%s", r.stdout)
	}
	for _, l := range lines[1:] {
		c := strings.Fields(l)
		n := func(name string) int {
			var v int
			fmt.Sscan(c[col[name]], &v)
			return v
		}
		sum := n("SUCCEEDED") + n("DEAD") + n("CANCELED") + n("PURGED") + n("PENDING") + n("RUNNING")
		if sum != n("TOTAL") {
			t.Errorf("runs list row does not add up (%d != TOTAL %d): %s", sum, n("TOTAL"), l)
		}
		if c[0] == fmt.Sprint(f.run1) && n("PURGED") != 2 {
			t.Errorf("run %d: PURGED %d, want 2: %s", f.run1, n("PURGED"), l)
		}
	}

	var s statsJSON
	decodeJSON(t, mustRun(t, 0, f.args("stats", "--json")...), &s)
	if s.Totals != (redrive.Counts{Total: 10, Pending: 1, Succeeded: 3, Dead: 3, Canceled: 1, Purged: 2}) {
		t.Errorf("stats totals: %+v", s.Totals)
	}
	if len(s.Purged) != 1 || s.Purged[0] != (pipelineCount{Pipeline: "ocr", Count: 2}) {
		t.Errorf("stats purged: %+v", s.Purged)
	}
	decodeJSON(t, mustRun(t, 0, f.args("stats", "--json", "--run", fmt.Sprint(f.run1))...), &s)
	if s.Totals.Purged != 2 || s.Totals.Total != 8 || !s.Totals.AddsUp() {
		t.Errorf("stats --run %d totals: %+v", f.run1, s.Totals)
	}
	decodeJSON(t, mustRun(t, 0, f.args("stats", "--json", "--pipeline", "webhook")...), &s)
	if s.Totals.Purged != 0 || len(s.Purged) != 0 {
		t.Errorf("stats --pipeline webhook counts ocr's purged items: %+v", s)
	}
	r = mustRun(t, 0, f.args("stats")...)
	wantContains(t, "stats table", r.stdout, "PURGED", "(purged)")
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "TOTAL") {
			if c := strings.Fields(l); len(c) < 8 || c[len(c)-2] != "2" || c[len(c)-1] != "10" {
				t.Errorf("TOTAL row %q: want 2 purged of 10", l)
			}
		}
	}
}
