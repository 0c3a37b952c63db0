package main

import (
	"fmt"
	"testing"
	"time"
)

// TestRunsShowTimeWaitingOnLimit: `runs show` says how much of the run's time its
// items spent waiting on rate limits (the fixture's item e waited 45 s after a 429).
func TestRunsShowTimeWaitingOnLimit(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	id := fmt.Sprint(f.run1)
	r := mustRun(t, 0, "runs", "show", id, "--db", f.db)
	wantContains(t, "runs show", r.stdout, "Waiting on limit", "45.0s of", "fetch 45.0s")
	var d runDetail
	decodeJSON(t, mustRun(t, 0, "runs", "show", id, "--json", "--db", f.db), &d)
	if d.WaitingOnLimit == nil || d.WaitingOnLimit.Total != 45*time.Second || d.WaitingOnLimit.Elapsed < time.Hour {
		t.Fatalf("waiting_on_limit %+v, want 45 s of about 2 h", d.WaitingOnLimit)
	}
}
