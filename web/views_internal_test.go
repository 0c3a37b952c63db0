package web

import (
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// TestNiceStep: the picked step spans the range in at most the buckets
// asked for, and in at most MaxTimelineBuckets beyond 60 weeks.
func TestNiceStep(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 30 * time.Second, time.Hour, 61 * time.Minute, 9 * 24 * time.Hour,
		60 * 7 * 24 * time.Hour, 61 * 7 * 24 * time.Hour, 10 * 365 * 24 * time.Hour} {
		st := niceStep(d, DefaultTimelineBuckets)
		f := redrive.TimelineFilter{Since: time.Unix(0, 0), Until: time.Unix(0, 0).Add(d), Step: st}
		if st < time.Second || f.Validate() != nil {
			t.Errorf("niceStep(%v) = %v: %v", d, st, f.Validate())
		}
		if d <= 60*7*24*time.Hour && f.Buckets() > DefaultTimelineBuckets {
			t.Errorf("niceStep(%v) = %v makes %d buckets", d, st, f.Buckets())
		}
	}
	if st := niceStep(time.Hour, 60); st != time.Minute {
		t.Errorf("niceStep(1h) = %v, want 1m", st)
	}
}
