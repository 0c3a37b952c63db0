package main

import (
	"testing"

	"github.com/redrive/redrive"
)

// TestStagesPauseResume: a pause is recorded in the database and the audit
// log; resuming removes it; unknown pipelines and missing flags are errors.
func TestStagesPauseResume(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	r := mustRun(t, 0, f.args("stages", "pause", "--pipeline", "ocr", "--stage", "extract", "--reason", "OCR service down")...)
	wantContains(t, "pause", r.stdout, "stage ocr/extract paused")
	r = mustRun(t, 0, f.args("stages", "pause", "--pipeline", "ocr", "--stage", "extract")...)
	wantContains(t, "pause again", r.stdout, "already paused")
	var ps []redrive.StagePause
	decodeJSON(t, mustRun(t, 0, f.args("stages", "list", "--json")...), &ps)
	if len(ps) != 1 || ps[0].Pipeline != "ocr" || ps[0].Stage != "extract" || ps[0].By == "" || ps[0].Reason != "OCR service down" {
		t.Fatalf("paused stages = %+v", ps)
	}
	mustRun(t, 0, f.args("stages", "resume", "--pipeline", "ocr", "--stage", "extract")...)
	decodeJSON(t, mustRun(t, 0, f.args("stages", "list", "--json")...), &ps)
	if len(ps) != 0 {
		t.Errorf("paused stages after resume = %+v", ps)
	}
	r = mustRun(t, 2, f.args("stages", "pause", "--pipeline", "ocr")...)
	wantContains(t, "stderr", r.stderr, "--stage")
	r = mustRun(t, 2, f.args("stages", "pause", "--pipeline", "nope", "--stage", "x")...)
	wantContains(t, "stderr", r.stderr, "--pipeline", "nope")
}
