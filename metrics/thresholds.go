package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Thresholds are the alert thresholds of one pipeline. The stuck threshold
// decides what redrive_items_stuck counts; the dead-letter tiers are
// exported as redrive_alert_dead_letters_per_hour, which the shipped alert
// rules (deploy/prometheus/alerts.yml) compare the dead letters of each
// stage with, so that a pipeline's tiers are set where the pipeline is
// configured rather than in the rules. A zero field takes the default of
// Options.
type Thresholds struct {
	// StuckAfter is how long a pending item of the pipeline may stay due
	// without being claimed before it counts as stuck. Default
	// Options.StuckAfter (15 min).
	StuckAfter time.Duration
	// DeadLettersWarning is how many items one stage may dead-letter in
	// an hour before RedriveDeadLettersGrowing (severity warning) fires.
	// Default Options.DeadLettersWarning (10).
	DeadLettersWarning float64
	// DeadLettersCritical is the dead letters an hour of one stage above
	// which RedriveDeadLettersCritical (severity critical) fires. Default
	// Options.DeadLettersCritical (1000).
	DeadLettersCritical float64
}

// Defaults of the dead-letter tiers.
const (
	// DefaultDeadLettersWarning is Options.DeadLettersWarning's default:
	// more than 10 dead letters of one stage in an hour is a warning.
	DefaultDeadLettersWarning = 10
	// DefaultDeadLettersCritical is Options.DeadLettersCritical's
	// default: more than 1,000 dead letters of one stage an hour is
	// critical.
	DefaultDeadLettersCritical = 1000
)

// Metric names of the thresholds.
const (
	nameStuckAfter       = "stuck_after_seconds"
	nameDeadLetterAlerts = "alert_dead_letters_per_hour"
)

// thresholdDescs describe the threshold gauges.
type thresholdDescs struct {
	stuckAfter, deadLetters *prometheus.Desc
}

func newThresholdDescs(ns string) thresholdDescs {
	return thresholdDescs{
		stuckAfter: prometheus.NewDesc(prometheus.BuildFQName(ns, "", nameStuckAfter),
			"The stuck threshold of a pipeline: how long a pending item may stay due without being claimed before it counts in redrive_items_stuck.",
			[]string{"pipeline"}, nil),
		deadLetters: prometheus.NewDesc(prometheus.BuildFQName(ns, "", nameDeadLetterAlerts),
			"The dead letters an hour of one stage of a pipeline above which the alert of the severity fires (warning, critical).",
			[]string{"pipeline", "severity"}, nil),
	}
}

// thresholds returns the thresholds of pipeline p, defaults filled in,
// from custom (Options.Thresholds' answer).
func (m *Metrics) thresholds(p string, custom map[string]Thresholds) Thresholds {
	t := custom[p]
	if t.StuckAfter <= 0 {
		t.StuckAfter = m.opts.StuckAfter
	}
	if t.DeadLettersWarning <= 0 {
		t.DeadLettersWarning = m.opts.DeadLettersWarning
	}
	if t.DeadLettersCritical <= 0 {
		t.DeadLettersCritical = m.opts.DeadLettersCritical
	}
	return t
}

// customThresholds returns what Options.Thresholds says now (nil without
// it).
func (m *Metrics) customThresholds() map[string]Thresholds {
	if m.opts.Thresholds == nil {
		return nil
	}
	return m.opts.Thresholds()
}

// thresholdGauges exports the thresholds of the pipelines with items and
// of those Options.Thresholds names.
func (m *Metrics) thresholdGauges(withItems []string, custom map[string]Thresholds) []prometheus.Metric {
	pipelines := slices.Clone(withItems)
	for p := range custom {
		pipelines = append(pipelines, p)
	}
	slices.Sort(pipelines)
	pipelines = slices.Compact(pipelines)
	out := make([]prometheus.Metric, 0, 3*len(pipelines))
	for _, p := range pipelines {
		t := m.thresholds(p, custom)
		out = append(out,
			prometheus.MustNewConstMetric(m.thresholdDescs.stuckAfter, prometheus.GaugeValue, t.StuckAfter.Seconds(), p),
			prometheus.MustNewConstMetric(m.thresholdDescs.deadLetters, prometheus.GaugeValue, t.DeadLettersWarning, p, "warning"),
			prometheus.MustNewConstMetric(m.thresholdDescs.deadLetters, prometheus.GaugeValue, t.DeadLettersCritical, p, "critical"))
	}
	return out
}
