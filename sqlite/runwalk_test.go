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
		joined := queryPlan(t, s, q, args)
		if !strings.Contains(joined, "items_run_state (run_id=? AND state=? AND rowid>?)") || strings.Contains(joined, "TEMP B-TREE") {
			t.Errorf("ListItems %+v plan: %s; want walks of items_run_state and no sort", f, joined)
		}
	}
}
