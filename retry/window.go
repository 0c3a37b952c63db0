package retry

import "time"

const windowBuckets = 10

// window counts two quantities over a sliding time window made of windowBuckets buckets.
// It is not safe for concurrent use; its owner locks.
type window struct {
	width   int64 // bucket width in nanoseconds
	buckets [windowBuckets]struct {
		epoch int64 // bucket number since the Unix epoch; 0 = never used
		a, b  float64
	}
}

func newWindow(d time.Duration) window {
	w := int64(d) / windowBuckets
	if w <= 0 {
		w = 1
	}
	return window{width: w}
}

func (w *window) add(now time.Time, a, b float64) {
	e := now.UnixNano()/w.width + 1
	bk := &w.buckets[e%windowBuckets]
	if bk.epoch != e {
		bk.epoch, bk.a, bk.b = e, 0, 0
	}
	bk.a += a
	bk.b += b
}

func (w *window) sums(now time.Time) (a, b float64) {
	e := now.UnixNano()/w.width + 1
	for i := range w.buckets {
		bk := &w.buckets[i]
		if bk.epoch > e-windowBuckets && bk.epoch <= e {
			a += bk.a
			b += bk.b
		}
	}
	return a, b
}

func (w *window) reset() {
	for i := range w.buckets {
		w.buckets[i].epoch = 0
	}
}
