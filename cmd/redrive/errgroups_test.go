package main

import (
	"testing"
)

func TestStatsErrorGroups(t *testing.T) {
	t.Parallel()
	f := newSQLiteFixture(t)
	r := mustRun(t, 0, f.args("stats")...)
	wantContains(t, "stats", r.stdout, "Errors by cause", "CAUSE", "HTTP 404: document not found", "connection reset by peer")

	var s statsJSON
	decodeJSON(t, mustRun(t, 0, f.args("stats", "--json", "--pipeline", "ocr")...), &s)
	found := false
	for _, g := range s.ErrorGroups {
		if g.Pipeline != "ocr" {
			t.Errorf("stats --pipeline ocr: group of %s", g.Pipeline)
		}
		if g.Stage == "extract" && g.Fingerprint == "connection reset by peer" {
			found = true
			if g.Dead != 1 || g.Failures != 3 {
				t.Errorf("connection reset group = %+v, want 1 dead of 3 failed attempts", g)
			}
		}
	}
	if !found {
		t.Errorf("no group for the connection resets: %+v", s.ErrorGroups)
	}
	if len(s.ErrorGroups) > 0 && s.ErrorGroups[0].Dead == 0 {
		t.Errorf("groups not ranked by deaths: %+v", s.ErrorGroups)
	}
}
