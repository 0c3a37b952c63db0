package loadbench

import (
	"fmt"
	"io"
	"slices"
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
			traceSends(w, r, time.Duration(i)*r.Width)
		}
		if win.Limited > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
}

// traceSends writes, for the window of r that begins at from, when the clients sent the
// requests that arrived in it (SentHeader) and the stalls of the benchmark's process
// around it: sends spread over the window or before it, with arrivals bunched, mean the
// server read late; sends bunched mean the client sent them together.
func traceSends(w io.Writer, r Result, from time.Duration) {
	to := from + r.Width
	var sent []time.Duration
	var lag time.Duration
	for _, s := range r.Stamps {
		if s.Arrived >= from && s.Arrived < to {
			sent = append(sent, s.Sent)
			lag = max(lag, s.Arrived-s.Sent)
		}
	}
	if len(sent) > 0 {
		slices.Sort(sent)
		before := 0
		for _, s := range sent {
			if s < from {
				before++
			}
		}
		fmt.Fprintf(w, "    sent: %d stamped, from %+.1f to %+.1f ms of the window's start (%d before it), densest 10 ms: %d, 100 ms: %d; longest arrival lag %.1f ms\n",
			len(sent), ms(sent[0]-from), ms(sent[len(sent)-1]-from), before, densest(sent, 10*time.Millisecond), densest(sent, 100*time.Millisecond), ms(lag))
	}
	for _, st := range r.Stalls {
		if st.At+st.Late >= from-r.Width && st.At < to {
			fmt.Fprintf(w, "    stall of the bench process: %.1f ms from %+.1f ms\n", ms(st.Late), ms(st.At-from))
		}
	}
	for _, st := range r.ServerStalls {
		if st.At+st.Late >= from-r.Width && st.At < to {
			fmt.Fprintf(w, "    stall of the server process: %.1f ms from %+.1f ms\n", ms(st.Late), ms(st.At-from))
		}
	}
}

// stallSummary says how many stalls were over 20 and 50 ms and the longest.
func stallSummary(stalls []Stall) string {
	var longest time.Duration
	over50 := 0
	for _, st := range stalls {
		longest = max(longest, st.Late)
		if st.Late > 50*time.Millisecond {
			over50++
		}
	}
	return fmt.Sprintf("over 20 ms: %d, over 50 ms: %d, longest %.1f ms", len(stalls), over50, ms(longest))
}

// TraceSends writes r's windows above factor × C counted by the clients' send times
// (SentHeader) rather than by the server's arrival times, and the stalls of the
// benchmark's process, for the variants whose client stamps its sends.
func TraceSends(w io.Writer, r Result, factor float64) {
	if len(r.Stamps) == 0 {
		return
	}
	limit := factor * r.Capacity * r.Width.Seconds()
	bySend := map[int]int{}
	for _, s := range r.Stamps {
		bySend[int(s.Sent/r.Width)]++
	}
	above, most := 0, 0
	for _, n := range bySend {
		most = max(most, n)
		if float64(n) > limit {
			above++
		}
	}
	server := ""
	if r.ServerStalls != nil {
		server = "; stalls of the server process " + stallSummary(r.ServerStalls)
	}
	fmt.Fprintf(w, "%s: by send time: %d windows above %g C, busiest %.1f C (%d stamped requests); by arrival: %d above, busiest %.1f C; stalls of the bench process %s%s\n",
		r.Name, above, factor, float64(most)/(r.Capacity*r.Width.Seconds()), len(r.Stamps), r.WindowsAbove(factor), r.PeakRatio(), stallSummary(r.Stalls), server)
}

// densest returns the most of the sorted times ts that fall within one span of width d.
func densest(ts []time.Duration, d time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i]-ts[j] >= d {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
