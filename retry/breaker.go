package retry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is the state of a Breaker. The zero value is BreakerClosed.
type BreakerState uint8

const (
	// BreakerClosed lets calls through and counts failures. The zero value.
	BreakerClosed BreakerState = iota
	// BreakerOpen refuses calls until its open period (BreakerOptions.OpenFor, doubling
	// up to MaxOpenFor while probes fail) has passed.
	BreakerOpen
	// BreakerHalfOpen lets HalfOpenProbes calls through to test the dependency.
	BreakerHalfOpen
)

var breakerStateNames = [...]string{"closed", "open", "half_open"}

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	if int(s) < len(breakerStateNames) {
		return breakerStateNames[s]
	}
	return fmt.Sprintf("BreakerState(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s BreakerState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// BreakerOptions configures a Breaker. The zero value is usable.
type BreakerOptions struct {
	// ConsecutiveFailures trips the breaker after this many failures in a row; 0 means 5,
	// a negative value disables this rule.
	ConsecutiveFailures int
	// FailureRate trips the breaker when failures/requests over Window reach it (with at
	// least MinRequests requests); 0 disables this rule.
	FailureRate float64
	// Window is the sliding window of FailureRate; 0 means 10s.
	Window time.Duration
	// MinRequests is the fewest requests in Window for FailureRate to apply; 0 means 20.
	MinRequests int
	// OpenFor is how long the breaker stays open, when it opens after being closed,
	// before letting probes through; 0 means 1s, so that recovery is noticed soon.
	OpenFor time.Duration
	// MaxOpenFor caps the open period, which doubles each time a probe fails while the
	// outage lasts and starts again from OpenFor once the breaker closes: 1s, 2s, 4s, ...
	// 30s at the defaults. 0 means 30s; a value at or below OpenFor keeps the period at
	// OpenFor.
	MaxOpenFor time.Duration
	// HalfOpenProbes is how many concurrent probe calls the half-open breaker lets through;
	// that many successes close it, one failure reopens it. 0 means 1.
	HalfOpenProbes int
	// OnStateChange, if not nil, is called after every state change, outside the breaker's
	// lock. Nil by default.
	OnStateChange func(from, to BreakerState)
	// Now returns the current time; nil means time.Now. Tests inject a clock.
	Now func() time.Time
}

// Breaker is a circuit breaker: closed, it lets calls through and counts dependency
// failures; after ConsecutiveFailures in a row, or a FailureRate over Window, it opens and
// refuses calls (ErrCircuitOpen) for OpenFor; then it becomes half-open and lets
// HalfOpenProbes calls through: their success closes it, a failure reopens it for twice
// as long as before, up to MaxOpenFor. At the defaults it probes 1s after opening, then
// after 2s, 4s, 8s, 16s and every 30s while the outage lasts, so a short outage costs
// about a second of refused calls and a long one a probe every 30s.
// Share one Breaker between all callers of one dependency (Policy.Breaker); Do then
// returns at once, without calling its operation, an *Error wrapping ErrCircuitOpen.
//
// A closed Breaker costs a successful call two atomic loads, and one add to a
// counter striped across cores when FailureRate is set; it takes no lock and
// does not read the clock, so callers on many cores do not contend. Failures and
// the open and half-open states take a lock. Successes are not timestamped: the
// FailureRate window takes those between two failures as spread evenly between
// them. A Breaker is safe for concurrent use.
type Breaker struct {
	o BreakerOptions

	state       atomic.Uint32 // BreakerState, read without the lock
	consecutive atomic.Int64  // failures in a row while closed
	ok          counter       // successes while closed (FailureRate only)

	mu        sync.Mutex
	openedAt  time.Time
	openFor   time.Duration // the current open period
	inFlight  int           // half-open probes allowed and not yet recorded
	successes int           // half-open probe successes
	failures  int64         // failures while closed, for FailureRate
	hist      history
}

// NewBreaker returns a closed Breaker with o's defaults applied.
func NewBreaker(o BreakerOptions) *Breaker {
	if o.ConsecutiveFailures == 0 {
		o.ConsecutiveFailures = 5
	}
	if o.Window <= 0 {
		o.Window = 10 * time.Second
	}
	if o.MinRequests <= 0 {
		o.MinRequests = 20
	}
	if o.OpenFor <= 0 {
		o.OpenFor = time.Second
	}
	if o.MaxOpenFor <= 0 {
		o.MaxOpenFor = 30 * time.Second
	}
	o.MaxOpenFor = max(o.MaxOpenFor, o.OpenFor)
	if o.HalfOpenProbes <= 0 {
		o.HalfOpenProbes = 1
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	b := &Breaker{o: o, ok: newCounter()}
	b.hist = newHistory(o.Window, o.Now(), 0, 0)
	return b
}

type transition struct{ from, to BreakerState }

func (b *Breaker) load() BreakerState { return BreakerState(b.state.Load()) }

// setLocked changes the state; the caller reports the returned transition after unlocking.
func (b *Breaker) setLocked(to BreakerState, now time.Time) transition {
	t := transition{b.load(), to}
	b.state.Store(uint32(to))
	b.consecutive.Store(0)
	b.inFlight, b.successes = 0, 0
	switch to {
	case BreakerOpen:
		b.openedAt = now
		if t.from == BreakerHalfOpen {
			// A probe failed: the outage lasts, probe less often.
			if b.openFor <= b.o.MaxOpenFor/2 {
				b.openFor *= 2
			} else {
				b.openFor = b.o.MaxOpenFor
			}
		} else {
			b.openFor = b.o.OpenFor
		}
	case BreakerClosed:
		b.hist.reset(now, b.ok.load(), b.failures)
	}
	return t
}

func (b *Breaker) report(ts ...transition) {
	if b.o.OnStateChange == nil {
		return
	}
	for _, t := range ts {
		if t.from != t.to {
			b.o.OnStateChange(t.from, t.to)
		}
	}
}

// dueLocked performs the open→half-open transition when the open period has passed.
func (b *Breaker) dueLocked(now time.Time) transition {
	s := b.load()
	if s == BreakerOpen && now.Sub(b.openedAt) >= b.openFor {
		return b.setLocked(BreakerHalfOpen, now)
	}
	return transition{s, s}
}

// Allow reports whether a call may proceed: nil, or ErrCircuitOpen when the breaker is
// open or half-open with all its probes in flight. Every allowed call must be followed by
// Record. Allow moves an open breaker to half-open once its open period has passed.
func (b *Breaker) Allow() error {
	if b.load() == BreakerClosed {
		return nil
	}
	b.mu.Lock()
	t := b.dueLocked(b.o.Now())
	var err error
	switch b.load() {
	case BreakerOpen:
		err = ErrCircuitOpen
	case BreakerHalfOpen:
		if b.inFlight >= b.o.HalfOpenProbes {
			err = ErrCircuitOpen
		} else {
			b.inFlight++
		}
	}
	b.mu.Unlock()
	b.report(t)
	return err
}

// Record reports the result of an allowed call: nil is a success. Final-class errors
// (Classify; bad input) mean the dependency answered, so they count as successes;
// context.Canceled says nothing about the dependency and is not counted.
func (b *Breaker) Record(err error) {
	switch {
	case err == nil:
		b.record(recSuccess)
	case errors.Is(err, context.Canceled):
		b.record(recIgnore)
	case Classify(err).Class == ClassFinal:
		b.record(recSuccess)
	default:
		b.record(recFailure)
	}
}

type recKind uint8

const (
	recSuccess recKind = iota
	recFailure
	recIgnore
)

func (b *Breaker) record(k recKind) {
	if k != recFailure && b.load() == BreakerClosed {
		// The hot path: no lock, no clock, no write to a shared line
		// unless a failure streak ends.
		if k == recSuccess {
			if b.o.FailureRate > 0 {
				b.ok.add(1)
			}
			if b.consecutive.Load() != 0 {
				b.consecutive.Store(0)
			}
		}
		return
	}
	b.mu.Lock()
	now := b.o.Now()
	t1 := b.dueLocked(now)
	t2 := transition{b.load(), b.load()}
	switch b.load() {
	case BreakerClosed:
		if k == recFailure {
			t2 = b.failureLocked(now)
		}
	case BreakerHalfOpen:
		if b.inFlight > 0 {
			b.inFlight--
		}
		switch k {
		case recSuccess:
			b.successes++
			if b.successes >= b.o.HalfOpenProbes {
				t2 = b.setLocked(BreakerClosed, now)
			}
		case recFailure:
			t2 = b.setLocked(BreakerOpen, now)
		}
	}
	b.mu.Unlock()
	b.report(t1, t2)
}

// failureLocked counts a failure of a closed breaker and opens it if a rule says so.
func (b *Breaker) failureLocked(now time.Time) transition {
	c := b.consecutive.Add(1)
	if b.o.ConsecutiveFailures > 0 && c >= int64(b.o.ConsecutiveFailures) {
		return b.setLocked(BreakerOpen, now)
	}
	if b.o.FailureRate > 0 {
		ok := b.ok.load()
		b.hist.observe(now, ok, b.failures)
		b.failures++
		okw, failw := b.hist.growth(now, ok, b.failures)
		if req := okw + failw; req >= float64(b.o.MinRequests) && failw/req >= b.o.FailureRate {
			return b.setLocked(BreakerOpen, now)
		}
	}
	return transition{BreakerClosed, BreakerClosed}
}

// SetConsecutiveFailures changes the failures in a row that trip the breaker, from the
// next failure on (BreakerOptions.ConsecutiveFailures; 0 means 5, a negative value
// disables the rule). It is for an owner that learns what its dependency is after
// building the breaker: redrive's engine lowers a stage's default breaker from 20 to 3
// once the stage is known to call over the network.
func (b *Breaker) SetConsecutiveFailures(n int) {
	if n == 0 {
		n = 5
	}
	b.mu.Lock()
	b.o.ConsecutiveFailures = n
	b.mu.Unlock()
}

// Reset closes the breaker now, as enough successful probes do, and starts its next
// open period from OpenFor again. It is for a caller that has seen the dependency answer
// while the breaker was open or half-open, such as a call that was already under way when
// the breaker opened: waiting for the next probe would only delay the recovery.
func (b *Breaker) Reset() {
	b.mu.Lock()
	t := transition{b.load(), BreakerClosed}
	if t.from != BreakerClosed {
		t = b.setLocked(BreakerClosed, b.o.Now())
	}
	b.mu.Unlock()
	b.report(t)
}

// State returns the current state, performing the open→half-open transition when due.
func (b *Breaker) State() BreakerState {
	if s := b.load(); s == BreakerClosed {
		return s
	}
	b.mu.Lock()
	t := b.dueLocked(b.o.Now())
	s := b.load()
	b.mu.Unlock()
	b.report(t)
	return s
}
