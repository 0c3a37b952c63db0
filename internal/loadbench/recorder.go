package loadbench

import (
	"sync"
	"time"
)

// Window is what a server received and answered in one window of time.
type Window struct {
	// Arrivals counts requests received.
	Arrivals int
	// OK counts 2xx answers, Limited 429s, Unavailable 503s; other answers are in Arrivals only.
	OK, Limited, Unavailable int
}

// Recorder counts arrivals and answers per window of Width since Start. It is safe for
// concurrent use.
type Recorder struct {
	// Start is time zero of the windows.
	Start time.Time
	// Width is the width of a window (100 ms in the benchmarks).
	Width time.Duration

	mu      sync.Mutex
	windows []Window
	keys    map[string]int
	calls   []keyedCall
	stamps  []Stamp
}

// Stamp is one arrival of a request that said when its client sent it (SentHeader).
type Stamp struct {
	// Sent and Arrived are the client's send time and the server's arrival time, since
	// Start.
	Sent, Arrived time.Duration
}

// keyedCall is one arrival of a named logical request.
type keyedCall struct {
	at  time.Duration // since Start
	key string
}

// NewRecorder returns a recorder whose windows of width start at start.
func NewRecorder(start time.Time, width time.Duration) *Recorder {
	return &Recorder{Start: start, Width: width, keys: map[string]int{}}
}

func (r *Recorder) window(at time.Time) *Window {
	i := max(int(at.Sub(r.Start)/r.Width), 0)
	for len(r.windows) <= i {
		r.windows = append(r.windows, Window{})
	}
	return &r.windows[i]
}

// Arrive records a request received at at; key, when not empty, names the logical request
// (an item) so that calls per logical request can be counted.
func (r *Recorder) Arrive(at time.Time, key string) {
	r.mu.Lock()
	r.window(at).Arrivals++
	if key != "" {
		r.keys[key]++
		r.calls = append(r.calls, keyedCall{at.Sub(r.Start), key})
	}
	r.mu.Unlock()
}

// Sent records that the request that arrived at at was sent by its client at sent.
func (r *Recorder) Sent(at, sent time.Time) {
	r.mu.Lock()
	r.stamps = append(r.stamps, Stamp{Sent: sent.Sub(r.Start), Arrived: at.Sub(r.Start)})
	r.mu.Unlock()
}

// Stamps returns a copy of the send times recorded so far, in order of arrival.
func (r *Recorder) Stamps() []Stamp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Stamp(nil), r.stamps...)
}

// Answer records the status of an answer given at at.
func (r *Recorder) Answer(at time.Time, status int) {
	r.mu.Lock()
	w := r.window(at)
	switch {
	case status >= 200 && status < 300:
		w.OK++
	case status == 429:
		w.Limited++
	case status == 503:
		w.Unavailable++
	}
	r.mu.Unlock()
}

// Windows returns a copy of the windows so far.
func (r *Recorder) Windows() []Window {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Window(nil), r.windows...)
}

// Keys returns how many logical requests were seen and how many calls they made.
func (r *Recorder) Keys() (keys, calls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.keys {
		keys++
		calls += n
	}
	return keys, calls
}

// KeysBetween returns how many logical requests called in [from, to) (since Start) and
// how many calls they made in that time.
func (r *Recorder) KeysBetween(from, to time.Duration) (keys, calls int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, c := range r.calls {
		if c.at >= from && c.at < to {
			calls++
			seen[c.key] = true
		}
	}
	return len(seen), calls
}

// Totals sums windows.
func Totals(ws []Window) Window {
	var t Window
	for _, w := range ws {
		t.Arrivals += w.Arrivals
		t.OK += w.OK
		t.Limited += w.Limited
		t.Unavailable += w.Unavailable
	}
	return t
}

// MaxArrivals returns the most arrivals in one window.
func MaxArrivals(ws []Window) int {
	m := 0
	for _, w := range ws {
		m = max(m, w.Arrivals)
	}
	return m
}

// ActiveSpan returns the time from the first window with an arrival to the end of the last
// window with a 2xx answer, or 0 when there was none.
func ActiveSpan(ws []Window, width time.Duration) time.Duration {
	first, last := -1, -1
	for i, w := range ws {
		if w.Arrivals > 0 && first < 0 {
			first = i
		}
		if w.OK > 0 {
			last = i
		}
	}
	if first < 0 || last < first {
		return 0
	}
	return time.Duration(last-first+1) * width
}
