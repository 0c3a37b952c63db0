package redrive

import (
	"testing"
	"time"
)

// The run monitor waits its interval after a quick check, and 19 times a
// slow check's duration after a slow one, up to a minute: checking takes
// at most a twentieth of the time whatever the runs hold.
func TestCheckWait(t *testing.T) {
	for _, c := range []struct{ interval, took, want time.Duration }{
		{time.Second, 5 * time.Millisecond, time.Second},
		{time.Second, 52 * time.Millisecond, time.Second},
		{time.Second, 120 * time.Millisecond, 2280 * time.Millisecond},
		{200 * time.Millisecond, 10 * time.Millisecond, 200 * time.Millisecond},
		{200 * time.Millisecond, 120 * time.Millisecond, 2280 * time.Millisecond},
		{time.Second, 2 * time.Second, 38 * time.Second},
		{time.Second, time.Hour, time.Minute},
		{2 * time.Minute, time.Hour, 2 * time.Minute},
	} {
		if got := checkWait(c.interval, c.took); got != c.want {
			t.Errorf("checkWait(%v, %v) = %v, want %v", c.interval, c.took, got, c.want)
		}
	}
}
