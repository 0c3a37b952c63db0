package storetest

import (
	"time"

	"github.com/redrive/redrive"
)

// testPaceWaits: a store sums the pace waits that engines add, per run and
// stage (redrive.PaceRecorder); waits of a run that does not exist are
// dropped, and a run's sums go with it.
func testPaceWaits(h *h) {
	pr, ok := h.s.(redrive.PaceRecorder)
	if !ok {
		h.Fatalf("%T does not implement redrive.PaceRecorder", h.s)
	}
	r := h.run("p", "")
	other := h.run("q", "")
	add := func(ws ...redrive.PaceWait) {
		h.Helper()
		if err := pr.AddPaceWaits(h.ctx, ws); err != nil {
			h.Fatalf("AddPaceWaits: %v", err)
		}
	}
	add(redrive.PaceWait{RunID: r.ID, Stage: "b", Calls: 3, Waited: 1500 * time.Millisecond},
		redrive.PaceWait{RunID: r.ID, Stage: "a", Calls: 1, Waited: 0},
		redrive.PaceWait{RunID: other.ID, Stage: "a", Calls: 7, Waited: time.Hour},
		redrive.PaceWait{RunID: other.ID + 1000, Stage: "a", Calls: 1, Waited: time.Second})
	add(redrive.PaceWait{RunID: r.ID, Stage: "b", Calls: 2, Waited: 500 * time.Millisecond})
	add()
	got, err := pr.PaceWaits(h.ctx, r.ID)
	if err != nil {
		h.Fatalf("PaceWaits: %v", err)
	}
	want := []redrive.PaceWait{
		{RunID: r.ID, Stage: "a", Calls: 1},
		{RunID: r.ID, Stage: "b", Calls: 5, Waited: 2 * time.Second},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		h.Fatalf("PaceWaits = %+v, want %+v", got, want)
	}
	if got, err := pr.PaceWaits(h.ctx, other.ID+1000); err != nil || len(got) != 0 {
		h.Fatalf("PaceWaits of a run that never was = %+v, %v; want none", got, err)
	}

	// Retention deletes the run, and its sums with it.
	if err := h.s.SetRunStatus(h.ctx, r.ID, redrive.RunCompleted, "", at(time.Hour)); err != nil {
		h.Fatal(err)
	}
	if _, runs, err := h.s.DeleteFinishedRuns(h.ctx, at(2*time.Hour), 0); err != nil || runs != 1 {
		h.Fatalf("DeleteFinishedRuns = %d runs, %v; want 1", runs, err)
	}
	if got, err := pr.PaceWaits(h.ctx, r.ID); err != nil || len(got) != 0 {
		h.Fatalf("PaceWaits of a deleted run = %+v, %v; want none", got, err)
	}
	if got, err := pr.PaceWaits(h.ctx, other.ID); err != nil || len(got) != 1 || got[0].Calls != 7 {
		h.Fatalf("PaceWaits of the other run = %+v, %v", got, err)
	}
}
