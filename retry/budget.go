package retry

import (
	"math"
	"sync"
	"time"
)

// BudgetOptions configures a Budget. The zero value is usable: 10% retries, a floor of
// one retry a second, saved credit capped at what 100ms of traffic earns.
type BudgetOptions struct {
	// Ratio is the credit, in retries, that each request earns; 0 means 0.1 (one retry
	// per ten requests). It bounds calls per logical request in an outage at 1 + Ratio.
	Ratio float64
	// MinPerSecond is a floor of retries per second allowed whatever the traffic, so that
	// low-traffic callers can still retry: each second earns at least this much credit,
	// in place of (not in addition to) what its requests earned. 0 means 1; a negative
	// value means no floor.
	MinPerSecond float64
	// Burst caps saved credit: the budget keeps at most the credit that Burst of recent
	// traffic earns (and at least one retry, and one second of the floor), so that credit
	// saved while the dependency was healthy cannot release a burst of retries when an
	// outage begins. 0 means 100ms.
	Burst time.Duration
	// Window is the period over which Stats counts requests and retries; 0 means 10s.
	// It does not change what TryRetry grants.
	Window time.Duration
	// Now returns the current time; nil means time.Now. Tests inject a clock.
	Now func() time.Time
}

// Budget caps retries relative to requests, so that an outage of a dependency is not
// multiplied by its callers' retries. Share one Budget between all callers of one
// dependency (Policy.Budget). Do counts one request per call (OnRequest) and asks
// TryRetry before every retry; when refused it returns at once an *Error wrapping
// ErrBudgetExhausted and the last error, classified ClassRetryable (so a durable layer
// schedules the item later).
//
// The budget is a token bucket, as Finagle's RetryBudget and the AWS SDK's retry quota
// are: every request earns Ratio of a retry, every retry spends one, and each second
// earns at least MinPerSecond. Saved credit is small (see Burst): a sliding window that
// lets retries reach Ratio × the requests of the last ten seconds lets the credit of a
// healthy spell out at once when an outage begins, nearly doubling the load in its first
// second. With the bucket, retries over any period are at most Ratio × its requests
// plus the saved credit (or the floor, when traffic is too light to reach it), so that
// at the defaults a 10 s outage of a dependency serving 100 requests a second sees
// 1.1 calls per logical request, in its first second as overall.
//
// OnRequest, which every Do calls, adds to a counter striped across cores: it takes no
// lock and does not read the clock. TryRetry and Stats lock, and credit the requests
// counted since they last looked. A Budget is safe for concurrent use.
type Budget struct {
	earn     int64 // credit a request earns, in millionths of a retry
	floor    int64 // credit a second earns at least, in millionths of a retry
	burst    int64 // nanoseconds of traffic whose credit may be saved
	now      func() time.Time
	requests counter

	mu          sync.Mutex
	credit      int64 // millionths of a retry
	seen        int64 // requests already credited
	last        int64 // when requests were last credited, in Unix nanoseconds
	second      int64 // the current second of the floor, in Unix seconds
	secondEarns int64 // credit the requests earned in that second
	retries     int64
	hist        history // a = requests, b = retries, for Stats
}

// unit is one retry's worth of credit.
const unit = 1_000_000

// NewBudget returns a Budget with o's defaults applied.
func NewBudget(o BudgetOptions) *Budget {
	if !(o.Ratio > 0) { // also NaN
		o.Ratio = 0.1
	}
	if o.MinPerSecond == 0 || math.IsNaN(o.MinPerSecond) {
		o.MinPerSecond = 1
	}
	if o.MinPerSecond < 0 {
		o.MinPerSecond = 0
	}
	if o.Burst <= 0 {
		o.Burst = 100 * time.Millisecond
	}
	if o.Window <= 0 {
		o.Window = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	now := o.Now()
	b := &Budget{
		earn:     toUnits(o.Ratio),
		floor:    toUnits(o.MinPerSecond),
		burst:    int64(o.Burst),
		now:      o.Now,
		requests: newCounter(),
		last:     now.UnixNano(),
		second:   now.Unix(),
		hist:     newHistory(o.Window, now, 0, 0),
	}
	b.credit = b.floor // a new budget may retry as soon as its floor allows
	return b
}

func toUnits(r float64) int64 {
	if r >= math.MaxInt64/(2*unit) {
		return math.MaxInt64 / (2 * unit)
	}
	return int64(math.Round(r * unit))
}

// OnRequest records one request (a first attempt), which earns Ratio of a retry.
func (b *Budget) OnRequest() { b.requests.add(1) }

// TryRetry reports whether a retry is allowed now and, if so, spends its credit.
func (b *Budget) TryRetry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.creditLocked(now)
	b.hist.observe(now, b.seen, b.retries)
	if b.credit < unit {
		return false
	}
	b.credit -= unit
	b.retries++
	return true
}

// creditLocked adds the credit earned since it last ran: Ratio for each request
// counted since, and the floor for each second that ended, capped as Burst says.
func (b *Budget) creditLocked(now time.Time) {
	t := max(now.UnixNano(), b.last)
	req := b.requests.load()
	n := req - b.seen
	earned := satMul(n, b.earn)
	// What the last Burst of traffic earned, taking the requests since the last
	// look as spread evenly over the time since.
	recent := earned
	if dt := t - b.last; dt > b.burst {
		recent = int64(float64(earned) * float64(b.burst) / float64(dt))
	}
	// While failures are frequent, credit comes in small amounts and is spent a retry
	// at a time: the fraction of a retry left over is not saved credit, so it is kept.
	limit := max(recent, unit, b.floor, b.credit%unit+recent)
	b.credit = addCapped(b.credit, earned, limit)
	b.secondEarns = satAdd(b.secondEarns, earned)
	if s := t / int64(time.Second); s > b.second {
		// The seconds that ended earned at least the floor each. Requests
		// seen now are counted in the first of them, which may underpay
		// the floor, never overpay it.
		owed := satAdd(max(b.floor-b.secondEarns, 0), satMul(s-b.second-1, b.floor))
		b.credit = addCapped(b.credit, owed, limit)
		b.second, b.secondEarns = s, 0
	}
	b.seen, b.last = req, t
}

// addCapped adds d to c up to limit; credit already above limit is kept.
func addCapped(c, d, limit int64) int64 {
	if c >= limit {
		return c
	}
	return min(satAdd(c, d), limit)
}

func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

func satMul(n, u int64) int64 {
	if n > 0 && u > math.MaxInt64/n {
		return math.MaxInt64
	}
	return n * u
}

// Stats returns the requests and retries counted over the last Window (10s by
// default). Requests between two looks (TryRetry, Stats) are taken as spread evenly
// between them.
func (b *Budget) Stats() (requests, retries float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.creditLocked(now)
	b.hist.observe(now, b.seen, b.retries)
	return b.hist.growth(now, b.seen, b.retries)
}
