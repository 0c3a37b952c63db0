package loadbench

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redrive/redrive"
)

// A timeline writes what happened when, relative to a server's start, for the --trace
// output of the benchmarks: it says why a figure is what it is.
type timeline struct {
	w     io.Writer
	start time.Time
	mu    sync.Mutex
}

func (t *timeline) printf(at time.Time, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "%8.3f s  %s\n", at.Sub(t.start).Seconds(), fmt.Sprintf(format, args...))
}

// observe logs the engine's breaker changes and, once per second, its attempts by outcome.
func (t *timeline) observe() func(redrive.Event) {
	var mu sync.Mutex
	var sec int64 = -1
	byOutcome := map[redrive.Outcome]int{}
	return func(ev redrive.Event) {
		switch ev := ev.(type) {
		case redrive.BreakerChanged:
			t.printf(ev.At, "stage breaker %s -> %s", ev.From, ev.To)
		case redrive.AttemptFinished:
			now := time.Now()
			s := int64(now.Sub(t.start) / time.Second)
			mu.Lock()
			if s != sec && sec >= 0 {
				t.printf(now, "attempts in second %d: %v", sec, byOutcome)
				byOutcome = map[redrive.Outcome]int{}
			}
			sec = s
			byOutcome[ev.Outcome]++
			mu.Unlock()
		}
	}
}

// windows logs the server's windows from index from to to (exclusive).
func (t *timeline) windows(ws []Window, width time.Duration, from, to int) {
	for i := max(from, 0); i < min(to, len(ws)); i++ {
		w := ws[i]
		t.printf(t.start.Add(time.Duration(i)*width), "window: %d arrivals, %d ok, %d 429, %d 503", w.Arrivals, w.OK, w.Limited, w.Unavailable)
	}
}

// TraceBursts writes, for every window of r above factor × C, when it was relative to
// the first 429 and to the latest window with a 429 before it, so that bursts can be told
// apart: slow start's (before any 429) or after a push back (a gate reopening, the pace).
func TraceBursts(w io.Writer, r Result, factor float64) {
	limit := factor * r.Capacity * r.Width.Seconds()
	first, last := -1, -1
	for i, win := range r.Windows {
		if float64(win.Arrivals) > limit {
			since := "before the first 429"
			if first >= 0 {
				since = fmt.Sprintf("%.1f s after the first 429, %.1f s after the latest (%d in that window)",
					float64(i-first)*r.Width.Seconds(),
					float64(i-last)*r.Width.Seconds(), r.Windows[last].Limited)
			}
			fmt.Fprintf(w, "%s: window at %.1f s: %d arrivals (%.1f C), %d ok, %d 429; %s\n", r.Name,
				float64(i)*r.Width.Seconds(), win.Arrivals, float64(win.Arrivals)/(r.Capacity*r.Width.Seconds()), win.OK, win.Limited, since)
		}
		if win.Limited > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
}
