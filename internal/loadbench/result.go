package loadbench

import (
	"fmt"
	"io"
	"time"
)

// Result is what one variant of a benchmark measured.
type Result struct {
	// Name names the variant.
	Name string
	// Items is how many items (logical requests) the variant had to do.
	Items int
	// Succeeded, Dead and Canceled count the items by their end; Unfinished counts those
	// still pending or running when the variant's time bound ran out.
	Succeeded, Dead, Canceled, Unfinished int
	// Workers is how many workers (goroutines, across processes) called the server.
	Workers int
	// Elapsed is the wall time of the variant.
	Elapsed time.Duration
	// Windows are the server's counts per window of Width.
	Windows []Window
	// Width is the width of Windows.
	Width time.Duration
	// Conns is how many TCP connections the server accepted.
	Conns int
	// Capacity is the server's limit C in requests per second.
	Capacity float64
	// Stamps are the client's send times beside the server's arrival times, for the
	// variants whose client sets SentHeader (engine, postgres); nil for the others.
	Stamps []Stamp
	// Stalls are the spells the benchmark's process (which runs the server unless
	// ServerProcess, and the engine variants' engine) did not run, when traced; nil
	// otherwise.
	Stalls []Stall
	// ServerStalls are the spells the server's own process did not run, with
	// ServerProcess; nil otherwise.
	ServerStalls []Stall
}

// Requests returns the requests the server received.
func (r Result) Requests() int { return Totals(r.Windows).Arrivals }

// SuccessRate returns the rate of 2xx answers over the time from the first arrival to the
// last 2xx answer, as a fraction of Capacity.
func (r Result) SuccessRate() float64 {
	span := ActiveSpan(r.Windows, r.Width)
	if span <= 0 || r.Capacity <= 0 {
		return 0
	}
	return float64(Totals(r.Windows).OK) / span.Seconds() / r.Capacity
}

// LimitedShare returns the share of requests answered 429.
func (r Result) LimitedShare() float64 {
	t := Totals(r.Windows)
	if t.Arrivals == 0 {
		return 0
	}
	return float64(t.Limited) / float64(t.Arrivals)
}

// PeakRatio returns the most arrivals in one window as a multiple of what Capacity allows
// in one window.
func (r Result) PeakRatio() float64 {
	if r.Capacity <= 0 {
		return 0
	}
	return float64(MaxArrivals(r.Windows)) / (r.Capacity * r.Width.Seconds())
}

// WindowsAbove returns how many windows had more arrivals than factor × what Capacity
// allows in one window.
func (r Result) WindowsAbove(factor float64) int {
	n := 0
	for _, w := range r.Windows {
		if float64(w.Arrivals) > factor*r.Capacity*r.Width.Seconds() {
			n++
		}
	}
	return n
}

// ConnsPerWorker returns the connections accepted per worker.
func (r Result) ConnsPerWorker() float64 { return float64(r.Conns) / float64(max(r.Workers, 1)) }

// CallsPerItem returns the requests per item.
func (r Result) CallsPerItem() float64 { return float64(r.Requests()) / float64(max(r.Items, 1)) }

// MeetsGoals reports whether r meets the overload goals of issue 9: no item dead or
// unfinished, a successful rate of at least 0.9 C, at most 5 % of requests answered 429, no
// window above 2 C, at most 2 connections per worker.
func (r Result) MeetsGoals() bool {
	return r.Dead == 0 && r.Unfinished == 0 && r.SuccessRate() >= 0.9 && r.LimitedShare() <= 0.05 &&
		r.PeakRatio() <= 2 && r.ConnsPerWorker() <= 2
}

// WriteTable writes results as a Markdown table.
func WriteTable(w io.Writer, rs []Result) {
	fmt.Fprintln(w, "| variant | items | succeeded | dead | unfinished | success rate / C | 429 share | max 100 ms window / C | windows > 2 C | connections / workers | calls per item | time | goals |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		goals := "no"
		if r.MeetsGoals() {
			goals = "met"
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %.2f | %.1f %% | %.1f | %d | %d / %d = %.2f | %.2f | %.1f s | %s |\n",
			r.Name, r.Items, r.Succeeded, r.Dead, r.Unfinished, r.SuccessRate(), 100*r.LimitedShare(), r.PeakRatio(),
			r.WindowsAbove(2), r.Conns, r.Workers, r.ConnsPerWorker(), r.CallsPerItem(), r.Elapsed.Seconds(), goals)
	}
}
