package runner

import (
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/redrive/redrive"
)

// Rate is a stage's rate limit written in YAML as calls per unit of time ("50/s",
// "3000/min", "100/h"; a bare number is per second), or "off" to turn flow control
// off for a stage that calls nothing that can be overloaded. The zero Rate is an
// unknown limit: the stage adapts to its dependency from slow start.
type Rate struct {
	// PerSecond is the rate in calls per second; 0 means unknown.
	PerSecond float64
	// Off turns flow control off.
	Off bool
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errAt(n, "want a rate like \"50/s\"")
	}
	s := strings.TrimSpace(n.Value)
	if strings.EqualFold(s, "off") {
		*r = Rate{Off: true}
		return nil
	}
	num, unit, hasUnit := strings.Cut(s, "/")
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return errAt(n, "invalid rate %q: want a positive number of calls per unit, like \"50/s\", \"3000/min\" or \"off\"", n.Value)
	}
	per := time.Second
	if hasUnit {
		switch strings.TrimSpace(unit) {
		case "s", "sec", "second":
			per = time.Second
		case "m", "min", "minute":
			per = time.Minute
		case "h", "hour":
			per = time.Hour
		default:
			return errAt(n, "invalid rate %q: the unit after '/' is s, min or h", n.Value)
		}
	}
	*r = Rate{PerSecond: v / per.Seconds()}
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (r Rate) MarshalYAML() (any, error) {
	if r.Off {
		return "off", nil
	}
	return strconv.FormatFloat(r.PerSecond, 'g', -1, 64) + "/s", nil
}

// rateLimit is the engine's flow control of a stage spec.
func (st *StageSpec) rateLimit() redrive.RateLimit {
	return redrive.RateLimit{Rate: st.RateLimit.PerSecond, Burst: st.Burst, Off: st.RateLimit.Off,
		MaxLimited: time.Duration(st.MaxLimited)}
}

// validateFlow reports flow-control keys that cannot be right, at their place.
func (st *StageSpec) validateFlow() error {
	if st.Burst < 0 {
		return at(keyPos(st.Keys, "burst", st.Pos), "burst %d must not be negative", st.Burst)
	}
	if st.MaxInFlight < 0 {
		return at(keyPos(st.Keys, "max_in_flight", st.Pos), "max_in_flight %d must not be negative", st.MaxInFlight)
	}
	if st.MaxInFlight > 0 && st.Concurrency > 0 && st.MaxInFlight != st.Concurrency {
		return at(keyPos(st.Keys, "max_in_flight", st.Pos), "max_in_flight %d and concurrency %d disagree; they are the same setting, keep one", st.MaxInFlight, st.Concurrency)
	}
	if st.Dependency != "" && !stageName.MatchString(st.Dependency) {
		return at(keyPos(st.Keys, "dependency", st.Pos), "dependency name %q: want letters, digits, '_', '.' or '-'", st.Dependency)
	}
	return nil
}

// inFlight is the stage's cap on attempts running at once: max_in_flight or its
// older name, concurrency.
func (st *StageSpec) inFlight() int { return max(st.MaxInFlight, st.Concurrency) }
