package runner

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseAlerts: a pipeline file's alerts: section sets its stuck
// threshold and dead-letter tiers; bad values are errors at their line.
func TestParseAlerts(t *testing.T) {
	s, err := Parse("p.yaml", []byte("alerts:\n  stuck_after: 2h\n  dead_letters_warning: 50\n  dead_letters_critical: 5000\nstages: [{name: a}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Alerts.StuckAfterDuration() != 2*time.Hour || *s.Alerts.DeadLettersWarning != 50 || *s.Alerts.DeadLettersCritical != 5000 {
		t.Errorf("alerts = %+v", s.Alerts)
	}
	s, err = Parse("p.yaml", []byte("stages: [{name: a}]\n"))
	if err != nil || s.Alerts.StuckAfter != 0 || s.Alerts.DeadLettersWarning != nil {
		t.Errorf("no alerts section: %+v, %v; want unset", s.Alerts, err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"alerts: {stuck_after: 10ms}\nstages: [{name: a}]\n", `p.yaml:1:23: alerts: stuck_after 10ms is shorter than 1s`},
		{"alerts: {stuck_after: 10}\nstages: [{name: a}]\n", `p.yaml:1:23: invalid duration "10"`},
		{"alerts:\n  dead_letters_warning: 0\nstages: [{name: a}]\n", `p.yaml:2:25: alerts: dead_letters_warning 0 must be a number of dead letters an hour above 0`},
		{"alerts:\n  dead_letters_warning: 100\n  dead_letters_critical: 10\nstages: [{name: a}]\n", `p.yaml:3:26: alerts: dead_letters_critical 10 is below dead_letters_warning 100`},
		{"alerts: {dead_letter_warning: 5}\nstages: [{name: a}]\n", `p.yaml:1:10: unknown key "dead_letter_warning"`},
	} {
		_, err := Parse("p.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
}
