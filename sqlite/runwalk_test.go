package sqlite

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/redrive/redrive"
)

// A listing by run walks items_run_state from the cursor in ID order,
// with or without states: no sort of the run's items on any page, which
// cost every page the whole run (30 ms a page at 10,000 items).
func TestListItemsByRunWalksIndex(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "redrive.db"))
	for _, f := range []redrive.ItemFilter{
		{RunID: 1, AfterID: 9500, Limit: 501},
		{RunID: 1, States: []redrive.State{redrive.StateSucceeded}, AfterID: 9800, Limit: 200},
		{RunID: 1, States: []redrive.State{redrive.StateDead, redrive.StateCanceled, redrive.StateDead}, Stage: "a", Limit: 50},
	} {
		q, args := listItemsSQL(f, false)
		rows, err := s.r.Query(`EXPLAIN QUERY PLAN `+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		joined := strings.Join(plan, "; ")
		if !strings.Contains(joined, "items_run_state (run_id=? AND state=? AND rowid>?)") || strings.Contains(joined, "TEMP B-TREE") {
			t.Errorf("ListItems %+v plan: %s; want walks of items_run_state and no sort", f, joined)
		}
	}
}
