package runner

import (
	"math"
	"time"
)

// AlertsSpec holds a pipeline's alert thresholds: its stuck threshold and
// its tiers of dead letters an hour. `redrive serve --pipelines` exports
// them as metrics that the shipped alert rules compare with
// (deploy/prometheus/alerts.yml, docs/operations.md), so that each
// pipeline is judged by its own volumes. Unset fields take serve's flags
// (--stuck-after, --dead-letters-warning, --dead-letters-critical), else
// their defaults.
type AlertsSpec struct {
	// StuckAfter is how long a pending item of the pipeline may stay due
	// without being claimed before it counts as stuck
	// (redrive_items_stuck, alert RedriveItemsStuck). Default unset: 15m.
	StuckAfter Duration `yaml:"stuck_after"`
	// DeadLettersWarning is how many items one stage may dead-letter in an
	// hour before RedriveDeadLettersGrowing (severity warning) fires.
	// Default unset: 10.
	DeadLettersWarning *float64 `yaml:"dead_letters_warning"`
	// DeadLettersCritical is the dead letters an hour of one stage above
	// which RedriveDeadLettersCritical (severity critical) fires. Default
	// unset: 1000.
	DeadLettersCritical *float64 `yaml:"dead_letters_critical"`

	// Keys holds the position of each key's value (set by Parse).
	Keys map[string]Pos `yaml:"-"`
}

// StuckAfterDuration returns StuckAfter as a time.Duration (0: unset).
func (a AlertsSpec) StuckAfterDuration() time.Duration { return time.Duration(a.StuckAfter) }

func (a *AlertsSpec) validate(fallback Pos) error {
	if a.StuckAfter != 0 && time.Duration(a.StuckAfter) < time.Second {
		return at(keyPos(a.Keys, "stuck_after", fallback), "alerts: stuck_after %s is shorter than 1s", time.Duration(a.StuckAfter))
	}
	for _, f := range []struct {
		key string
		v   *float64
	}{{"dead_letters_warning", a.DeadLettersWarning}, {"dead_letters_critical", a.DeadLettersCritical}} {
		if f.v != nil && (math.IsNaN(*f.v) || math.IsInf(*f.v, 0) || *f.v <= 0) {
			return at(keyPos(a.Keys, f.key, fallback), "alerts: %s %v must be a number of dead letters an hour above 0", f.key, *f.v)
		}
	}
	if a.DeadLettersWarning != nil && a.DeadLettersCritical != nil && *a.DeadLettersCritical < *a.DeadLettersWarning {
		return at(keyPos(a.Keys, "dead_letters_critical", fallback), "alerts: dead_letters_critical %v is below dead_letters_warning %v",
			*a.DeadLettersCritical, *a.DeadLettersWarning)
	}
	return nil
}
