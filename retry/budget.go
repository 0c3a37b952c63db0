package retry

import (
	"sync"
	"time"
)

// BudgetOptions configures a Budget. The zero value is usable.
type BudgetOptions struct {
	// Ratio is the share of retries allowed relative to requests over Window; 0 means 0.1.
	Ratio float64
	// MinPerSecond is a floor of retries per second allowed whatever the traffic, so that
	// low-traffic callers can still retry; 0 means 1. A negative value means no floor.
	MinPerSecond float64
	// Window is the sliding window over which requests and retries are counted; 0 means 10s.
	Window time.Duration
	// Now returns the current time; nil means time.Now. Tests inject a clock.
	Now func() time.Time
}

// Budget caps retries relative to recent requests, so that an outage of a dependency is
// not multiplied by its callers' retries. Share one Budget between all callers of one
// dependency (Policy.Budget). A retry is granted while
//
//	retries < Ratio × requests + MinPerSecond × Window
//
// over the sliding Window. Do counts one request per call and asks TryRetry before every
// retry; when refused it returns at once an *Error wrapping ErrBudgetExhausted and the
// last error, classified ClassRetryable (so a durable layer schedules the item later).
//
// OnRequest, which every Do calls, adds to a counter striped across cores: it takes no
// lock and does not read the clock. TryRetry and Stats lock, and estimate the requests
// in the window from the counter's totals they observed before (see history).
// A Budget is safe for concurrent use.
type Budget struct {
	ratio    float64
	floor    float64
	now      func() time.Time
	requests counter

	mu      sync.Mutex
	retries int64
	hist    history // a = requests, b = retries
}

// NewBudget returns a Budget with o's defaults applied.
func NewBudget(o BudgetOptions) *Budget {
	if o.Ratio <= 0 {
		o.Ratio = 0.1
	}
	if o.MinPerSecond == 0 {
		o.MinPerSecond = 1
	}
	if o.MinPerSecond < 0 {
		o.MinPerSecond = 0
	}
	if o.Window <= 0 {
		o.Window = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Budget{ratio: o.Ratio, floor: o.MinPerSecond * o.Window.Seconds(), now: o.Now,
		requests: newCounter(), hist: newHistory(o.Window, o.Now(), 0, 0)}
}

// OnRequest records one request (a first attempt).
func (b *Budget) OnRequest() { b.requests.add(1) }

// TryRetry reports whether a retry is allowed now and, if so, records it.
func (b *Budget) TryRetry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	req, ret := b.windowLocked()
	if ret+1 > b.ratio*req+b.floor {
		return false
	}
	b.retries++
	return true
}

// windowLocked returns the requests and retries over the window ending now.
func (b *Budget) windowLocked() (requests, retries float64) {
	now, req := b.now(), b.requests.load()
	b.hist.observe(now, req, b.retries)
	return b.hist.growth(now, req, b.retries)
}

// Stats returns the requests and retries counted over the current window.
func (b *Budget) Stats() (requests, retries float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.windowLocked()
}
