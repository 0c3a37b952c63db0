package retry

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// LimiterOptions configures a Limiter. The zero value is usable: a limiter for a
// dependency whose limit is unknown, which starts slowly and adapts.
type LimiterOptions struct {
	// Rate is the most calls per second the limiter lets start, and where it starts.
	// 0 means the limit is unknown: the limiter starts in slow start, which caps its
	// calls twice, by time (InitialRate, doubling every 2.5 s of calls) and by calls in
	// flight (InitialWindow, widened by one call per success); at the first push back it
	// paces calls at a rate estimated from the successes of the last second, and from
	// then on it adapts with no ceiling.
	Rate float64
	// Burst is how many calls may start together after a quiet spell; 0 means 1, so that
	// calls are evenly spaced.
	Burst int
	// MinRate is the floor the adaptive rate never drops below; 0 means 1 call/s (or Rate
	// when Rate is lower).
	MinRate float64
	// InitialWindow is how many calls may be in flight at the start of slow start; 0 means 4.
	// Unused when Rate is set.
	InitialWindow int
	// InitialRate is the rate slow start begins at, in calls per second; 0 means
	// DefaultInitialRate (10). Slow start spaces its calls evenly at a rate that doubles
	// with every 2.5 s of calls that keep to it, so that a dependency whose round trips
	// take a millisecond still sees a ramp and not a burst: a token bucket whose burst is
	// a second of its rate C runs dry at 1.94 C, where a window clocked by round trips
	// alone sent 6 – 15 C in a tenth of a second. The price is time: reaching a limit C
	// takes about 2.5 × log2(C/InitialRate) seconds (50/s: 6 s, 1,000/s: 17 s), so a
	// caller that knows its dependency takes more sets a higher InitialRate (or Rate).
	// A negative value turns the ramp off: slow start by the window alone, whose first
	// tenth of a second may carry any number of calls. Unused when Rate is set.
	InitialRate float64
	// Decrease is the factor a push back multiplies the rate by; 0 means 0.7. Values
	// outside (0, 1) are replaced by the default.
	Decrease float64
	// Increase is how many calls per second the rate gains per second of successes once it
	// is back at the rate of the last push back; 0 means 1. Below that rate it regains half
	// the gap each second.
	Increase float64
	// Fixed keeps the rate at Rate: push backs neither lower it nor end anything. Default
	// false.
	Fixed bool
	// Now returns the current time; nil means time.Now. Tests inject a clock; Wait still
	// sleeps in real time for the delays computed on it.
	Now func() time.Time
}

// Limiter paces the calls to one dependency, adapting their rate to the dependency's
// push backs (AIMD, as TCP does): a push back (a 429, a 503, a rate-limited error)
// multiplies the rate by Decrease, at most once per round of calls; successes raise it
// additively, up to Rate when Rate is set. A limiter whose Rate is unknown first ramps up
// in slow start, so that even its first second is no burst. Share one Limiter between all
// callers of one dependency.
//
// Paced calls are evenly spaced even when the process stalls: a caller whose slot
// passed while it could not run, and that wakes just after another call started, takes a
// fresh slot instead of going out together with the others woken by the stall.
//
// Call Wait before each call and report its result on the Permit it returns: Success,
// PushBack, or Done for a result that says nothing about the dependency's capacity.
// A Limiter is safe for concurrent use; its success path takes no lock.
type Limiter struct {
	o        LimiterOptions
	ceiling  float64 // +Inf when Rate is unknown
	floor    float64
	decrease float64
	increase float64
	burst    int64

	rate     atomic.Uint64 // float64 bits; +Inf: not paced (slow start)
	interval atomic.Int64  // nanoseconds between call starts; 0: not paced
	tat      atomic.Int64  // theoretical arrival time of the next call (GCRA), Unix ns
	limited  atomic.Int64  // when a call last had to wait for the pace, Unix ns
	lastCut  atomic.Int64  // when the rate was last lowered, Unix ns
	peak     atomic.Uint64 // float64 bits: the rate at the last push back
	first    atomic.Int64  // the first call's start, Unix ns
	pause    atomic.Int64  // no call starts before this, Unix ns
	started  atomic.Int64  // the latest start of a paced call, Unix ns
	succ     successRing

	// Slow start: a ramp of evenly spaced calls (its rate in ramp, its next slot in
	// tat) and a window of calls in flight that grows by one per success.
	ramp     atomic.Uint64 // float64 bits; 0: slow start is not paced by time
	slow     atomic.Bool
	window   atomic.Int64
	inflight atomic.Int64
	mu       sync.Mutex
	widened  chan struct{} // closed and replaced when the window widens or a call ends, if waited on
	// waited is whether a caller took widened to wait on since it was
	// last replaced: a signal with no waiter leaves the channel as it is,
	// so that calls in slow start allocate nothing. Guarded by mu.
	waited bool

	sleepHook func(context.Context, time.Duration) error // tests: sleep in the test's time
}

// Permit is one call let through by a Limiter. Report its result exactly once with
// Success, PushBack or Done.
type Permit struct {
	l     *Limiter
	start int64
	slow  bool
}

// NewLimiter returns a Limiter with o's defaults applied.
func NewLimiter(o LimiterOptions) *Limiter {
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Limiter{o: o, ceiling: math.Inf(1), burst: int64(max(o.Burst, 1)), widened: make(chan struct{})}
	if o.Rate > 0 {
		l.ceiling = o.Rate
	}
	l.floor = o.MinRate
	if l.floor <= 0 {
		l.floor = 1
	}
	l.floor = min(l.floor, l.ceiling)
	l.decrease = o.Decrease
	if l.decrease <= 0 || l.decrease >= 1 {
		l.decrease = 0.7
	}
	l.increase = o.Increase
	if l.increase <= 0 {
		l.increase = 1
	}
	if o.Rate > 0 {
		l.setRate(o.Rate)
		l.peak.Store(math.Float64bits(o.Rate))
	} else {
		l.rate.Store(math.Float64bits(math.Inf(1)))
		l.slow.Store(true)
		l.window.Store(int64(max(o.InitialWindow, 0)))
		if o.InitialWindow <= 0 {
			l.window.Store(4)
		}
		switch {
		case o.InitialRate == 0:
			l.ramp.Store(math.Float64bits(DefaultInitialRate))
		case o.InitialRate > 0:
			l.ramp.Store(math.Float64bits(o.InitialRate))
		}
	}
	return l
}

// Rate returns the rate calls are paced at, in calls per second; +Inf while a limiter
// whose Rate is unknown is still in slow start.
func (l *Limiter) Rate() float64 { return math.Float64frombits(l.rate.Load()) }

// SlowStart reports whether the limiter is still ramping up towards its first push back.
func (l *Limiter) SlowStart() bool { return l.slow.Load() }

// Ramp makes slow start pace its calls by time from rate calls per second (0 means
// DefaultInitialRate), as LimiterOptions.InitialRate does, for a limiter built with the
// ramp off (InitialRate < 0) that learns it calls a dependency that may be overloaded. It
// does nothing when the limiter ramps already, when slow start has ended, or when Rate is
// set. It reports whether it turned the ramp on.
func (l *Limiter) Ramp(rate float64) bool {
	if l.ramp.Load() != 0 || !l.slow.Load() {
		return false
	}
	if rate <= 0 {
		rate = DefaultInitialRate
	}
	return l.ramp.CompareAndSwap(0, math.Float64bits(rate))
}

// Wait blocks until a call may start and returns its Permit, or returns ctx's error.
func (l *Limiter) Wait(ctx context.Context) (Permit, error) {
	// Never paused (0): no clock read for it.
	if u := l.pause.Load(); u != 0 && u > l.o.Now().UnixNano() {
		// Paused: resume from a random point of the first interval (or of 50 ms
		// in slow start), so that callers released together do not start together.
		spread := max(l.interval.Load(), int64(50*time.Millisecond))
		d := u - l.o.Now().UnixNano() + rand.Int64N(spread)
		t := time.NewTimer(time.Duration(d))
		select {
		case <-ctx.Done():
			t.Stop()
			return Permit{}, ctx.Err()
		case <-t.C:
		}
	}
	if l.slow.Load() {
		if err := l.enterWindow(ctx); err != nil {
			return Permit{}, err
		}
		if l.slow.Load() {
			now := l.o.Now().UnixNano()
			grow := true
			for {
				d, iv := l.reserveRamp(now, grow)
				if d <= 0 {
					break
				}
				if err := l.sleep(ctx, time.Duration(d)); err != nil {
					l.leaveWindow()
					return Permit{}, err
				}
				slot := now + d
				now = l.o.Now().UnixNano()
				// The ramp's slots are handed out ahead as the pace's are, and a
				// stall releases them together just the same (see lateTogether).
				// A fresh slot taken for that reason does not grow the ramp again.
				if !l.slow.Load() || !l.lateTogether(slot, now, iv) {
					break
				}
				grow = false
			}
		}
		if l.slow.Load() {
			now := l.o.Now().UnixNano()
			l.started.Store(now)
			l.first.CompareAndSwap(0, now)
			return Permit{l: l, start: now, slow: true}, nil
		}
		// Slow start ended while this call waited for the window or for its slot of
		// the ramp: pace it as everybody else, not at the ramp that was pushed back.
		l.leaveWindow()
	}
	now := l.o.Now().UnixNano()
	for {
		d := l.reserve(now)
		if d <= 0 {
			break
		}
		if err := l.sleep(ctx, time.Duration(d)); err != nil {
			return Permit{}, err
		}
		slot := now + d
		now = l.o.Now().UnixNano()
		if !l.lateTogether(slot, now, l.interval.Load()) {
			break
		}
		// Woke late and another call has just started: the process stalled (load, a
		// collection) and released the callers whose slots passed meanwhile all at
		// once. Going now would send them together, above the rate; take a fresh slot
		// behind the callers already waiting instead.
	}
	l.started.Store(now)
	l.first.CompareAndSwap(0, now)
	return Permit{l: l, start: now}, nil
}

// lateAfter is how late after its slot a call that slept may still start whatever
// other calls do: more than timers' ordinary lateness on a loaded machine, less than
// the stall of a process that the machine leaves unscheduled for a tenth of a second.
const lateAfter = 10 * time.Millisecond

// lateTogether reports whether a call whose slot was at slot, awake at now, is late
// (by more than an interval iv of the pace or of slow start's ramp, and more than
// lateAfter) while another call started less
// than half an interval ago. Otherwise it claims now as the latest start, so that of
// the late callers woken together exactly one goes. A caller that is merely late goes:
// if every wake-up is late (a machine that is slow all the time), late callers still
// start about an interval apart and do not take fresh slots forever.
func (l *Limiter) lateTogether(slot, now, iv int64) bool {
	if now-slot <= max(iv, int64(lateAfter)) {
		return false
	}
	for {
		last := l.started.Load()
		if now-last < iv/2 {
			return true
		}
		if l.started.CompareAndSwap(last, now) {
			// This call goes in place of the slot it missed: the next slot the pace
			// hands out is an interval after it, not a passed one that would send a
			// re-reserved caller along with it.
			for {
				tat := l.tat.Load()
				if tat >= now+iv || l.tat.CompareAndSwap(tat, now+iv) {
					return false
				}
			}
		}
	}
}

// sleep waits for d or until ctx is done, in real time (or in the test's time).
func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	if l.sleepHook != nil {
		return l.sleepHook(ctx, d)
	}
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// reserve takes the next slot of the pace (GCRA) and returns how long to wait for it.
func (l *Limiter) reserve(now int64) int64 {
	for {
		iv := l.interval.Load()
		if iv == 0 {
			return 0
		}
		tat := l.tat.Load()
		next := max(tat, now) + iv
		if !l.tat.CompareAndSwap(tat, next) {
			continue
		}
		d := next - l.burst*iv - now
		if d > 0 {
			l.limited.Store(now)
			return d
		}
		if next-now > (l.burst-1)*iv {
			l.limited.Store(now)
		}
		return 0
	}
}

// DefaultInitialRate is the rate, in calls per second, at which a Limiter whose Rate is
// unknown begins its slow start when LimiterOptions.InitialRate is 0.
const DefaultInitialRate = 10

// rampDoubling is how long slow start's rate takes to double while calls keep to it.
// A ramp that doubles every d seconds spends a token bucket's burst b on top of its rate C
// by the time it reaches x·C, where x - 1 - ln x = (b/C)·ln(2)/d. For the common burst of
// a second of rate (b = C) that is 2.68 C at d = 1 s, 2.08 C at 2 s and 1.94 C at 2.5 s:
// 2.5 s is the fastest doubling that keeps such a bucket's first refusals under 2 C. A
// smaller burst is spent sooner (b = C/10: 1.25 C).
const rampDoubling = 2500 * time.Millisecond

// reserveRamp takes the next slot of slow start's ramp and returns how long to wait for
// it and the ramp's interval. A call that keeps to the ramp (it waits for its slot, or comes within an interval
// of it) raises the ramp's rate by 2^(interval/rampDoubling): rampDoubling of such calls
// doubles it, unless grow is false (a call taking a fresh slot after a stall). Calls that
// come slower than the ramp leave it as it is, so a limiter that
// idles (or that its window holds back) does not ramp up to a rate it never tried.
func (l *Limiter) reserveRamp(now int64, grow bool) (d, iv int64) {
	for {
		bits := l.ramp.Load()
		if bits == 0 {
			return 0, 0
		}
		r := math.Float64frombits(bits)
		iv := int64(float64(time.Second) / r)
		tat := l.tat.Load()
		slot := max(tat, now)
		if !l.tat.CompareAndSwap(tat, slot+iv) {
			continue
		}
		if grow && now-tat < iv {
			growth := math.Exp2(float64(iv) / float64(rampDoubling))
			for {
				bits := l.ramp.Load()
				if bits == 0 || l.ramp.CompareAndSwap(bits, math.Float64bits(math.Float64frombits(bits)*growth)) {
					break
				}
			}
		}
		return slot - now, iv
	}
}

func (l *Limiter) enterWindow(ctx context.Context) error {
	for {
		n := l.inflight.Load()
		if n < l.window.Load() || !l.slow.Load() {
			if l.inflight.CompareAndSwap(n, n+1) {
				return nil
			}
			continue
		}
		l.mu.Lock()
		ch := l.widened
		l.waited = true
		l.mu.Unlock()
		// Looked at again after taking the channel: a call that ended
		// before this line is seen here, one that ends after it closes ch.
		if l.inflight.Load() < l.window.Load() || !l.slow.Load() {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (l *Limiter) leaveWindow() {
	l.inflight.Add(-1)
	l.signal()
}

func (l *Limiter) signal() {
	l.mu.Lock()
	if l.waited {
		close(l.widened)
		l.widened = make(chan struct{})
		l.waited = false
	}
	l.mu.Unlock()
}

func (l *Limiter) setRate(r float64) {
	r = min(max(r, l.floor), l.ceiling)
	l.rate.Store(math.Float64bits(r))
	l.interval.Store(max(int64(float64(time.Second)/r), 1))
}

// Success reports that the call succeeded: the rate rises (or, in slow start, the
// window widens by one call).
func (p Permit) Success() {
	l := p.l
	if l == nil {
		return
	}
	now := l.o.Now().UnixNano()
	l.succ.add(now)
	if p.slow {
		l.window.Add(1)
		l.leaveWindow()
		return
	}
	if l.o.Fixed || now-l.limited.Load() > int64(time.Second) {
		// The pace did not hold anybody back lately: a rate that is not
		// used is not evidence that the dependency takes more.
		return
	}
	for {
		bits := l.rate.Load()
		r := math.Float64frombits(bits)
		if r >= l.ceiling || math.IsInf(r, 1) {
			return
		}
		gain := l.increase
		if peak := math.Float64frombits(l.peak.Load()); r < peak {
			gain = max(gain, (peak-r)/2)
		}
		// Successes arrive about r a second: gain/r each raises the rate by
		// gain per second.
		nr := min(r+gain/r, l.ceiling)
		if l.rate.CompareAndSwap(bits, math.Float64bits(nr)) {
			l.interval.Store(max(int64(float64(time.Second)/nr), 1))
			return
		}
	}
}

// PushBack reports that the dependency pushed back (a 429, a 503, a rate-limited
// error): the rate drops by the Decrease factor, once for all the calls that started
// before the previous drop. The first push back ends slow start. PushBack reports
// whether this push back lowered the rate (false for the others of its round).
func (p Permit) PushBack() bool {
	l := p.l
	if l == nil {
		return false
	}
	if p.slow {
		l.inflight.Add(-1)
	}
	if l.o.Fixed {
		if p.slow {
			l.signal()
		}
		return false
	}
	now := l.o.Now().UnixNano()
	var last int64
	for {
		last = l.lastCut.Load()
		if p.start < last {
			// Started before the last drop: that drop already answered it.
			if p.slow {
				l.signal()
			}
			return false
		}
		if l.lastCut.CompareAndSwap(last, now) {
			break
		}
	}
	r := l.Rate()
	cycle := !l.slow.Load() && last != 0 && now-last >= int64(cycleMin)
	if l.slow.Load() {
		// Slow start ends at the rate the dependency delivered: the successes of the
		// last second, which also counts a burst it let through. With hardly any
		// success to go by, the window halves instead, as TCP's does.
		elapsed := min(max(now-l.first.Load(), int64(100*time.Millisecond)), int64(time.Second))
		n := l.succ.sum(now)
		if n < 2 {
			for {
				w := l.window.Load()
				if l.window.CompareAndSwap(w, max(w/2, 1)) {
					break
				}
			}
			for {
				bits := l.ramp.Load()
				if bits == 0 || l.ramp.CompareAndSwap(bits, math.Float64bits(max(math.Float64frombits(bits)/2, l.floor))) {
					break
				}
			}
			if p.slow {
				l.signal()
			}
			return true
		}
		if !l.slow.Swap(false) {
			return true
		}
		r = max(float64(n)*float64(time.Second)/float64(elapsed), l.floor)
		l.tat.Store(now)
		l.signal()
	}
	r = min(r, l.ceiling)
	nr := r * l.decrease
	if cycle {
		// What the dependency delivered since the last push back is its rate over
		// the whole cycle (a token bucket refills while the gate is closed and
		// empties again), where the rate that was pushed back only bounds it: slow
		// start's first estimate counts the bucket's burst as rate, and cutting 30 %
		// at a time from there sent a burst above the limit after every Retry-After.
		if c := l.succ.rateSince(last, now); c < r {
			r = max(c, l.floor)
			nr = min(nr, r)
		}
	}
	l.peak.Store(math.Float64bits(r))
	l.setRate(nr)
	return true
}

// cycleMin is the shortest time between two push backs over which the successes tell
// the dependency's rate: shorter, and a few calls more or less change the estimate by
// more than the cut.
const cycleMin = time.Second

// Done reports a result that says nothing about the dependency's capacity (an invalid
// input, a call that was abandoned before it went out).
func (p Permit) Done() {
	if p.l != nil && p.slow {
		p.l.leaveWindow()
	}
}

// PauseUntil makes every call wait until t, then resumes at the current rate from a
// random point of the first interval, so that callers released together do not start
// together.
func (l *Limiter) PauseUntil(t time.Time) {
	at := t.UnixNano()
	for {
		cur := l.pause.Load()
		if cur >= at || l.pause.CompareAndSwap(cur, at) {
			break
		}
	}
	iv := l.interval.Load()
	if iv == 0 {
		return
	}
	next := at + rand.Int64N(iv+1) + (l.burst-1)*iv
	for {
		tat := l.tat.Load()
		if tat >= next || l.tat.CompareAndSwap(tat, next) {
			return
		}
	}
}

// successRing counts successes over the last five seconds in 100 ms buckets. A bucket
// being reset while another goroutine adds to it may lose that count: the ring is an
// estimate, kept lock-free for the success path.
type successRing struct {
	b [50]struct{ epoch, n atomic.Int64 }
}

const ringBucket = int64(100 * time.Millisecond)

func (r *successRing) add(now int64) {
	e := now/ringBucket + 1
	bk := &r.b[e%int64(len(r.b))]
	if old := bk.epoch.Load(); old != e && bk.epoch.CompareAndSwap(old, e) {
		bk.n.Store(0)
	}
	bk.n.Add(1)
}

// sum returns the successes of the last second.
func (r *successRing) sum(now int64) int64 {
	return r.count(now-int64(time.Second)+ringBucket, now)
}

// count returns the successes in the buckets from the one holding from to the one
// holding now, at most the ring's length back.
func (r *successRing) count(from, now int64) int64 {
	e := now/ringBucket + 1
	e0 := max(from/ringBucket+1, e-int64(len(r.b))+1)
	var s int64
	for i := range r.b {
		bk := &r.b[i]
		if ep := bk.epoch.Load(); ep >= e0 && ep <= e {
			s += bk.n.Load()
		}
	}
	return s
}

// rateSince returns the successes per second from the bucket after the one holding
// from (which holds successes from before it too) to now, at most the ring's length
// back.
func (r *successRing) rateSince(from, now int64) float64 {
	e := now/ringBucket + 1
	e0 := max(from/ringBucket+2, e-int64(len(r.b))+1)
	begin := (e0 - 1) * ringBucket
	if now <= begin {
		return math.Inf(1)
	}
	return float64(r.count(begin, now)) * float64(time.Second) / float64(now-begin)
}
