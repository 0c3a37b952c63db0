package retry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) add(d time.Duration)     { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_700_000_000, 0)} }
func trans(from, to BreakerState) string { return fmt.Sprintf("%v->%v", from, to) }

func TestBreakerConsecutive(t *testing.T) {
	c := newClock()
	var changes []string
	b := NewBreaker(BreakerOptions{ConsecutiveFailures: 3, OpenFor: 10 * time.Second, HalfOpenProbes: 2,
		Now: c.now, OnStateChange: func(f, to BreakerState) { changes = append(changes, trans(f, to)) }})
	fail := func() {
		t.Helper()
		if err := b.Allow(); err != nil {
			t.Fatalf("Allow: %v", err)
		}
		b.Record(errBoom)
	}
	fail()
	fail()
	if err := b.Allow(); err != nil {
		t.Fatal(err)
	}
	b.Record(nil) // success resets the count
	fail()
	fail()
	if b.State() != BreakerClosed {
		t.Fatal("opened too early")
	}
	fail()
	if b.State() != BreakerOpen {
		t.Fatalf("state %v, want open", b.State())
	}
	if err := b.Allow(); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Allow while open = %v", err)
	}
	c.add(9 * time.Second)
	if b.State() != BreakerOpen {
		t.Fatal("half-open too early")
	}
	c.add(time.Second)
	if b.State() != BreakerHalfOpen {
		t.Fatalf("state %v, want half_open", b.State())
	}
	// Two probes allowed, a third refused.
	if first, second := b.Allow(), b.Allow(); first != nil || second != nil {
		t.Fatalf("probes refused: %v, %v", first, second)
	}
	if err := b.Allow(); !errors.Is(err, ErrCircuitOpen) {
		t.Fatal("third probe allowed")
	}
	b.Record(nil)
	if b.State() != BreakerHalfOpen {
		t.Fatal("closed after one of two probes")
	}
	b.Record(nil)
	if b.State() != BreakerClosed {
		t.Fatalf("state %v, want closed", b.State())
	}
	// Half-open failure reopens.
	fail()
	fail()
	fail()
	c.add(10 * time.Second)
	if b.Allow() != nil {
		t.Fatal("probe refused")
	}
	b.Record(errBoom)
	if b.State() != BreakerOpen {
		t.Fatal("probe failure did not reopen")
	}
	want := []string{"closed->open", "open->half_open", "half_open->closed", "closed->open", "open->half_open", "half_open->open"}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Errorf("changes %v, want %v", changes, want)
	}
}

func TestBreakerFailureRate(t *testing.T) {
	c := newClock()
	b := NewBreaker(BreakerOptions{ConsecutiveFailures: -1, FailureRate: 0.5, MinRequests: 10, Window: 10 * time.Second, Now: c.now})
	// 9 failures of 9: below MinRequests.
	for range 9 {
		b.Record(errBoom)
	}
	if b.State() != BreakerClosed {
		t.Fatal("opened below MinRequests")
	}
	// The window slides: old failures are forgotten.
	c.add(11 * time.Second)
	for range 6 {
		b.Record(nil)
	}
	for range 4 {
		b.Record(errBoom)
	}
	if b.State() != BreakerClosed {
		t.Fatal("4/10 opened it")
	}
	b.Record(errBoom) // 5/11
	b.Record(errBoom) // 6/12 = 0.5
	if b.State() != BreakerOpen {
		t.Fatalf("state %v, want open at 50%%", b.State())
	}
}

func TestBreakerIgnoresFinalAndCanceled(t *testing.T) {
	b := NewBreaker(BreakerOptions{ConsecutiveFailures: 2})
	for range 5 {
		b.Record(Final(errBoom))
		b.Record(context.Canceled)
	}
	if b.State() != BreakerClosed {
		t.Fatal("final/canceled errors counted as failures")
	}
	b.Record(context.DeadlineExceeded)
	b.Record(errBoom)
	if b.State() != BreakerOpen {
		t.Fatal("timeouts must count")
	}
	if BreakerHalfOpen.String() != "half_open" || BreakerOpen.String() != "open" || BreakerClosed.String() != "closed" {
		t.Error("String")
	}
}

// TestBreakerConcurrent drives one Breaker from many goroutines through
// failures, opening, probing and closing; run it with -race. The success path
// takes no lock, so this checks it against the locked transitions.
func TestBreakerConcurrent(t *testing.T) {
	c := &syncClock{t: time.Unix(1_700_000_000, 0)}
	var mu sync.Mutex
	var opened, closed int
	// The goroutines stop once the breaker has cycled twice. A fixed
	// number of calls is not enough: a goroutine holding the half-open
	// probe may be descheduled while the others spin through their
	// rejections, moving the shared clock past the end of the run.
	var cycled atomic.Bool
	b := NewBreaker(BreakerOptions{ConsecutiveFailures: 3, FailureRate: 0.5, MinRequests: 10, OpenFor: time.Second,
		Now: c.now, OnStateChange: func(_, to BreakerState) {
			mu.Lock()
			defer mu.Unlock()
			switch to {
			case BreakerOpen:
				opened++
			case BreakerClosed:
				closed++
			}
			if opened >= 2 && closed >= 2 {
				cycled.Store(true)
			}
		}})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			// The cap only bounds a broken breaker: each probe lands in
			// the dependency's up half with probability about 1/2, and
			// the cap allows thousands of probes.
			for i := 0; i < 1_000_000 && !cycled.Load(); i++ {
				// Every call takes a millisecond; the dependency is down
				// for 2 s of every 4.
				c.add(time.Millisecond)
				if b.Allow() != nil {
					continue
				}
				if c.now().Sub(time.Unix(1_700_000_000, 0))%(4*time.Second) < 2*time.Second {
					b.Record(errBoom)
				} else {
					b.Record(nil)
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	gotOpened, gotClosed := opened, closed
	mu.Unlock()
	if gotOpened < 2 || gotClosed < 2 {
		t.Fatalf("opened %d, closed %d times: the breaker did not cycle twice", gotOpened, gotClosed)
	}
	// The dependency is back: the breaker closes and stays closed.
	c.add(time.Hour)
	for range 100 {
		if err := b.Allow(); err != nil {
			t.Fatal(err)
		}
		b.Record(nil)
	}
	if s := b.State(); s != BreakerClosed {
		t.Fatalf("state %v after recovery", s)
	}
}

// syncClock is a test clock that goroutines may read and advance at once.
type syncClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *syncClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *syncClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestBreakerBacksOff: the breaker probes 1s after it opens, then backs its
// open period off while probes fail (2s, 4s, ... 30s), and starts again from
// 1s once a probe closes it.
func TestBreakerBacksOff(t *testing.T) {
	c := newClock()
	b := NewBreaker(BreakerOptions{ConsecutiveFailures: 1, Now: c.now})
	// openFor waits until the breaker lets a probe through and returns how
	// long that took, stepping the clock by 100ms.
	openFor := func() time.Duration {
		t.Helper()
		var waited time.Duration
		for b.Allow() != nil {
			c.add(100 * time.Millisecond)
			waited += 100 * time.Millisecond
			if waited > time.Hour {
				t.Fatal("the breaker never let a probe through")
			}
		}
		return waited
	}
	if err := b.Allow(); err != nil {
		t.Fatal(err)
	}
	b.Record(errBoom) // opens
	var got []time.Duration
	for range 8 {
		got = append(got, openFor())
		b.Record(errBoom) // the probe fails: open again, for longer
	}
	s := time.Second
	want := []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s, 30 * s}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("open periods %v, want %v", got, want)
	}
	// Recovery: the probe succeeds and closes the breaker; the next outage
	// starts from 1s again.
	openFor()
	b.Record(nil)
	if st := b.State(); st != BreakerClosed {
		t.Fatalf("state %v after a successful probe", st)
	}
	if err := b.Allow(); err != nil {
		t.Fatal(err)
	}
	b.Record(errBoom)
	if d := openFor(); d != s {
		t.Fatalf("open for %v after closing, want 1s", d)
	}

	// Options: a constant period, and a custom range.
	c2 := newClock()
	constant := NewBreaker(BreakerOptions{ConsecutiveFailures: 1, OpenFor: 5 * s, MaxOpenFor: 5 * s, Now: c2.now})
	constant.Record(errBoom)
	c2.add(5 * s)
	if constant.Allow() != nil {
		t.Fatal("no probe after 5s")
	}
	constant.Record(errBoom)
	c2.add(5 * s)
	if constant.State() != BreakerHalfOpen {
		t.Fatal("MaxOpenFor = OpenFor must keep the period constant")
	}
	if o := (NewBreaker(BreakerOptions{OpenFor: time.Minute})).o; o.MaxOpenFor != time.Minute {
		t.Fatalf("OpenFor above the default MaxOpenFor: MaxOpenFor %v, want 1m", o.MaxOpenFor)
	}
}

// TestBreakerReset: Reset closes an open breaker at once, reports the change, and the
// next outage's open period starts from OpenFor again.
func TestBreakerReset(t *testing.T) {
	c := newClock()
	var changes []string
	b := NewBreaker(BreakerOptions{ConsecutiveFailures: 1, Now: c.now,
		OnStateChange: func(from, to BreakerState) { changes = append(changes, trans(from, to)) }})
	errBoom := errors.New("boom")
	b.Record(errBoom)
	c.add(time.Second)
	if err := b.Allow(); err != nil {
		t.Fatal(err)
	}
	b.Record(errBoom) // the probe failed: open for 2s
	if b.State() != BreakerOpen {
		t.Fatalf("state %v, want open", b.State())
	}
	b.Reset()
	if b.State() != BreakerClosed || b.Allow() != nil {
		t.Fatalf("state %v after Reset, want closed", b.State())
	}
	b.Reset() // closed already: no change reported
	b.Record(errBoom)
	c.add(time.Second)
	if b.State() != BreakerHalfOpen {
		t.Fatalf("state %v 1s after opening again, want half_open (the period starts from OpenFor)", b.State())
	}
	want := []string{"closed->open", "open->half_open", "half_open->open", "open->closed", "closed->open", "open->half_open"}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
}

// TestBreakerSetConsecutiveFailures: a breaker built to trip after 20 failures in a row
// trips after 3 once told so, and a streak under way counts toward the new threshold.
func TestBreakerSetConsecutiveFailures(t *testing.T) {
	b := NewBreaker(BreakerOptions{ConsecutiveFailures: 20, Now: newClock().now})
	fail := errors.New("503")
	b.Record(fail)
	b.SetConsecutiveFailures(3)
	b.Record(fail)
	if b.State() != BreakerClosed {
		t.Fatalf("state %v after 2 failures", b.State())
	}
	b.Record(fail)
	if b.State() != BreakerOpen {
		t.Fatalf("state %v after 3 failures in a row, want open", b.State())
	}
}
