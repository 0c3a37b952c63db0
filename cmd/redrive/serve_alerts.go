package main

import (
	"fmt"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive/metrics"
	"github.com/redrive/redrive/runner"
)

// alertFlags are serve's --stuck-after, --dead-letters-warning and
// --dead-letters-critical: a value for every pipeline, or PIPELINE=VALUE
// for one (repeatable).
type alertFlags struct {
	stuckAfter, warning, critical []string
}

// alertThresholds are the thresholds alertFlags set: defaults for every
// pipeline and each pipeline's own.
type alertThresholds struct {
	defaults    metrics.Thresholds
	perPipeline map[string]metrics.Thresholds
}

// parse reads the flags. A bad value is a usage error naming its flag.
func (f alertFlags) parse() (alertThresholds, error) {
	out := alertThresholds{perPipeline: map[string]metrics.Thresholds{}}
	set := func(flag, raw string, apply func(*metrics.Thresholds, string) error) error {
		pipeline, value, one := strings.Cut(raw, "=")
		if !one {
			pipeline, value = "", raw
		}
		if one && pipeline == "" {
			return flagErrorf(flag, "%q names no pipeline: give VALUE, or PIPELINE=VALUE", raw)
		}
		t := out.defaults
		if one {
			t = out.perPipeline[pipeline]
		}
		if err := apply(&t, strings.TrimSpace(value)); err != nil {
			return flagErrorf(flag, "%q: %v", raw, err)
		}
		if one {
			out.perPipeline[pipeline] = t
		} else {
			out.defaults = t
		}
		return nil
	}
	perHour := func(s string) (float64, error) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 || v != v || v > 1e15 {
			return 0, fmt.Errorf("want a number of dead letters an hour above 0")
		}
		return v, nil
	}
	for _, raw := range f.stuckAfter {
		err := set("stuck-after", raw, func(t *metrics.Thresholds, s string) error {
			d, err := time.ParseDuration(s)
			if err != nil || d < time.Second {
				return fmt.Errorf("want a duration of 1s or more, such as 15m or 2h")
			}
			t.StuckAfter = d
			return nil
		})
		if err != nil {
			return out, err
		}
	}
	for _, raw := range f.warning {
		err := set("dead-letters-warning", raw, func(t *metrics.Thresholds, s string) (err error) {
			t.DeadLettersWarning, err = perHour(s)
			return err
		})
		if err != nil {
			return out, err
		}
	}
	for _, raw := range f.critical {
		err := set("dead-letters-critical", raw, func(t *metrics.Thresholds, s string) (err error) {
			t.DeadLettersCritical, err = perHour(s)
			return err
		})
		if err != nil {
			return out, err
		}
	}
	d := out.defaults
	if d.DeadLettersWarning > 0 && d.DeadLettersCritical > 0 && d.DeadLettersCritical < d.DeadLettersWarning {
		return out, flagErrorf("dead-letters-critical", "%v is below --dead-letters-warning %v", d.DeadLettersCritical, d.DeadLettersWarning)
	}
	return out, nil
}

// metricsOptions returns the metrics options of the thresholds: the
// defaults, and each pipeline's from files (the pipeline files' alerts:
// sections, read at each refresh so that a reload applies) under its own
// flags.
func (a alertThresholds) metricsOptions(files *atomic.Pointer[map[string]runner.AlertsSpec]) metrics.Options {
	return metrics.Options{
		StuckAfter: a.defaults.StuckAfter, DeadLettersWarning: a.defaults.DeadLettersWarning, DeadLettersCritical: a.defaults.DeadLettersCritical,
		Thresholds: func() map[string]metrics.Thresholds {
			out := map[string]metrics.Thresholds{}
			if p := files.Load(); p != nil {
				for name, s := range *p {
					t := metrics.Thresholds{StuckAfter: s.StuckAfterDuration()}
					if s.DeadLettersWarning != nil {
						t.DeadLettersWarning = *s.DeadLettersWarning
					}
					if s.DeadLettersCritical != nil {
						t.DeadLettersCritical = *s.DeadLettersCritical
					}
					if t != (metrics.Thresholds{}) {
						out[name] = t
					}
				}
			}
			for name, f := range a.perPipeline {
				t := out[name]
				if f.StuckAfter > 0 {
					t.StuckAfter = f.StuckAfter
				}
				if f.DeadLettersWarning > 0 {
					t.DeadLettersWarning = f.DeadLettersWarning
				}
				if f.DeadLettersCritical > 0 {
					t.DeadLettersCritical = f.DeadLettersCritical
				}
				out[name] = t
			}
			return out
		},
	}
}

// checkActorHeader refuses a --actor-header that is not a header name, or
// one that carries credentials rather than a name.
func checkActorHeader(h string) error {
	if h == "" {
		return nil
	}
	for _, r := range h {
		if r > 126 || r <= 32 || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return flagErrorf("actor-header", "%q is not a header name (e.g. X-Forwarded-User)", h)
		}
	}
	switch textproto.CanonicalMIMEHeaderKey(h) {
	case "Authorization", "Cookie", "Proxy-Authorization":
		return flagErrorf("actor-header", "%s carries credentials, not a name: give the header your proxy sets to the user (e.g. X-Forwarded-User)", h)
	}
	return nil
}

// loopback reports whether addr, a listener's address, is a loopback one.
func loopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
