package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/runner"
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

// TestRunsShowTimeWaitingOnThePace: after a run whose stage is paced at 20
// calls/s, `runs show` (text and JSON), read from the database once the run's
// process is gone, says how long the calls waited for their turns.
func TestRunsShowTimeWaitingOnThePace(t *testing.T) {
	t.Parallel()
	const items = 10
	e := newRunEnv(t)
	p := e.write("p.yaml", `name: paced
workers: 4
stages:
  - name: work
    rate_limit: 20/s
    exec:
      command: ${STAGE_SH}
    timeout: 10s
`)
	var in strings.Builder
	for i := range items {
		fmt.Fprintf(&in, "{\"id\": %d, \"mode\": \"ok\"}\n", i)
	}
	s := e.summary(runner.ExitCompleted, p, "--input", e.write("in.jsonl", in.String()))
	id := fmt.Sprint(s.RunID)
	var d runDetail
	decodeJSON(t, mustRun(t, 0, "runs", "show", id, "--json", "--db", "sqlite:"+e.db), &d)
	// Ten calls 50 ms apart: the ones claimed together wait their turns.
	if len(d.PaceWaits) != 1 || d.PaceWaits[0].Stage != "work" || d.PaceWaits[0].Calls != items || d.PaceWaits[0].Waited <= 0 {
		t.Fatalf("pace_waits %+v, want %d calls of stage work that waited", d.PaceWaits, items)
	}
	r := mustRun(t, 0, "runs", "show", id, "--db", "sqlite:"+e.db)
	wantContains(t, "runs show", r.stdout, "Waiting on the pace", fmt.Sprintf("work: %d calls waited", items))
}
