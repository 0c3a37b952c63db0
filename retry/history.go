package retry

import "time"

// historyBuckets is how many observations a history keeps per window.
const historyBuckets = 10

// A history estimates how much two cumulative counts grew over the last window
// without timestamping every event: the hot path only adds to counters, and
// the slow path (failures, scrapes) observes the counters' totals now and
// then. It keeps at most one observation per tenth of the window, back to the
// last one before the window began, and takes the events between two
// observations as spread evenly between them. The estimate is exact for
// events observed where they happened, and for steady traffic. A history is
// not safe for concurrent use; its owner locks.
type history struct {
	window int64 // nanoseconds
	width  int64 // bucket width in nanoseconds
	pts    []point
}

type point struct{ t, a, b int64 }

func newHistory(window time.Duration, now time.Time, a, b int64) history {
	w := max(int64(window), historyBuckets)
	h := history{window: w, width: w / historyBuckets, pts: make([]point, 0, historyBuckets+4)}
	h.reset(now, a, b)
	return h
}

// reset forgets the past: counts are measured from (now, a, b) on.
func (h *history) reset(now time.Time, a, b int64) {
	h.pts = append(h.pts[:0], point{now.UnixNano(), a, b})
}

// observe records the totals a and b at now. The first observation of a
// history is its anchor and is never merged, so counts since it stay exact.
func (h *history) observe(now time.Time, a, b int64) {
	t := now.UnixNano()
	last := &h.pts[len(h.pts)-1]
	t = max(t, last.t) // a clock that steps back does not reorder the past
	switch {
	case len(h.pts) > 1 && t/h.width == last.t/h.width:
		*last = point{t, a, b}
	case len(h.pts) == cap(h.pts):
		copy(h.pts, h.pts[1:])
		h.pts[len(h.pts)-1] = point{t, a, b}
	default:
		h.pts = append(h.pts, point{t, a, b})
	}
	// Keep one observation at or before the window's start, none older.
	k := 0
	for k+1 < len(h.pts) && h.pts[k+1].t <= t-h.window {
		k++
	}
	if k > 0 {
		n := copy(h.pts, h.pts[k:])
		h.pts = h.pts[:n]
	}
}

// growth returns how much a and b, whose totals are a and b at now, grew over
// the window that ends at now.
func (h *history) growth(now time.Time, a, b int64) (da, db float64) {
	t := now.UnixNano()
	start := t - h.window
	first := h.pts[0]
	if first.t >= start {
		return float64(a - first.a), float64(b - first.b)
	}
	// first is at or before start: find the segment that contains start.
	p0, p1 := first, point{max(t, first.t), a, b}
	for _, p := range h.pts[1:] {
		if p.t > start {
			p1 = p
			break
		}
		p0 = p
	}
	baseA, baseB := float64(p0.a), float64(p0.b)
	if p1.t > p0.t {
		f := float64(start-p0.t) / float64(p1.t-p0.t)
		baseA += f * float64(p1.a-p0.a)
		baseB += f * float64(p1.b-p0.b)
	}
	return float64(a) - baseA, float64(b) - baseB
}
