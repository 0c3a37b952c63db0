package redrive

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive/retry"
)

// RateLimit is the flow control of a stage: how fast its calls to its dependency start.
// The zero value adapts to a dependency whose limit is unknown: the stage starts slowly,
// ramps up until the dependency first pushes back (a rate-limited result: a 429 or a 503
// with Retry-After from an HTTP stage, retry.RateLimited from a Go handler, exit 76 from
// an exec stage), then lowers its rate multiplicatively on every push back and raises it
// additively on successes; a Retry-After closes the stage's gate until then.
type RateLimit struct {
	// Rate is the most calls per second the stage (or its Dependency) starts, summed over
	// every process that shares the store when the store supports shared limits (both
	// the SQLite and the PostgreSQL store do). Push backs lower the rate below it.
	// Default 0: the limit is unknown and the stage adapts from slow start.
	Rate float64
	// Burst is how many calls may start together after a quiet spell. Default 0: 1, so
	// that calls are evenly spaced.
	Burst int
	// MinRate is the floor push backs never lower the rate below. Default 0: 1 call/s.
	MinRate float64
	// MaxLimited bounds how long the stage may stay limited as a whole (pushed back with
	// no success) while its items wait for free: after that, rate-limited results count
	// against the items' own allowance (Policy.MaxRateLimitWaits, then attempts), so an
	// item never waits forever. Default 0: 10 minutes.
	MaxLimited time.Duration
	// Off turns flow control off: no pacing, no gate and no outage pause, for a stage
	// that calls nothing that can be overloaded. Default false.
	Off bool
}

// DefaultMaxLimited is RateLimit.MaxLimited when it is 0.
const DefaultMaxLimited = 10 * time.Minute

func (r RateLimit) validate() error {
	if r.Rate < 0 || math.IsNaN(r.Rate) || math.IsInf(r.Rate, 0) || r.Burst < 0 || r.MinRate < 0 || math.IsNaN(r.MinRate) || r.MaxLimited < 0 {
		return fmt.Errorf("rate limit: negative or invalid rate, burst, min rate or max limited")
	}
	if r.Rate > 0 && r.MinRate > r.Rate {
		return fmt.Errorf("rate limit: min rate %v above rate %v", r.MinRate, r.Rate)
	}
	return nil
}

// defaultBreaker is the outage pause of a stage without a Breaker: 20 dependency
// failures in a row (more than the calls a client has in flight, so that a stage
// whose items fail on their own rarely trips it) pause the stage, which probes again
// every second while the outage lasts. The period does not back off as
// retry.Breaker's default does: a probe is one call a second against the stage's
// whole backlog, and a backed-off period (1, 2, 4, 8 s ...) is the time a
// recovered dependency goes unused: 6 s after a 10 s outage, where a constant
// second costs at most one.
func defaultBreaker() *retry.Breaker {
	return retry.NewBreaker(retry.BreakerOptions{ConsecutiveFailures: 20, OpenFor: time.Second, MaxOpenFor: time.Second})
}

// flow is the flow control of one dependency: the stages that name it share its pace,
// gate and breaker.
type flow struct {
	name     string
	limit    RateLimit
	lim      *retry.Limiter
	gate     retry.Gate
	breaker  *retry.Breaker
	shared   *sharedPace // nil unless the rate is known and the store shares limits
	maxLimit time.Duration

	lastSuccess  atomic.Int64 // start of the latest successful call, Unix ns
	limitedSince atomic.Int64 // start of the spell pushed back without a success; 0 when none
	failingSince atomic.Int64 // start of the spell of dependency failures without a success; 0 when none
	rounds       atomic.Int64 // push backs in a row, for the delay without Retry-After
	waited       atomic.Int64 // nanoseconds calls spent waiting on the pace and the gate
	paced        atomic.Int64 // calls the pace let start
	network      atomic.Bool  // the handler said it calls over the network (NetworkDependency)
	ownBreaker   bool         // breaker is defaultBreaker's, the flow's to tune
	limitedTotal atomic.Int64 // nanoseconds of ended spells limited as a whole

	// paces marks a flow that its stages' attempts carry as their calls'
	// retry.Pacer (set at Start; see workerCtx).
	paces bool
}

func newFlow(name string, r RateLimit, br *retry.Breaker, now func() time.Time) *flow {
	f := &flow{name: name, limit: r, breaker: br, maxLimit: r.MaxLimited}
	if f.maxLimit == 0 {
		f.maxLimit = DefaultMaxLimited
	}
	// A stage's slow start is clocked by its window alone (InitialRate -1) until its
	// handler says it calls over the network (NetworkDependency): a stage may call nothing
	// that can be overloaded, and a ramp by time from 10 calls/s would hold a no-op stage
	// back for half a minute on its way to 20,000/s.
	f.lim = retry.NewLimiter(retry.LimiterOptions{Rate: r.Rate, Burst: r.Burst, MinRate: r.MinRate, InitialRate: -1, Now: now})
	return f
}

// NetworkDependency implements retry.Pacer: the stage's handler calls over the network
// (retryhttp.Transport says so on every request, as does the runner's http stage), so
// the stage takes on what the transport's own flow control did before the stage's took
// it over: slow start ramps by time from retry.DefaultInitialRate, and the default
// breaker pauses the stage after networkOutageAfter failures in a row rather than 20.
// One atomic load after the first call.
func (f *flow) NetworkDependency() {
	if f.network.Load() || f.network.Swap(true) {
		return
	}
	if f.lim != nil {
		f.lim.Ramp(0)
	}
	if f.ownBreaker {
		f.breaker.SetConsecutiveFailures(networkOutageAfter)
	}
}

// networkOutageAfter is how many dependency failures in a row (5xx without Retry-After,
// connection refused, timeouts) pause a stage that calls over the network, as they
// paused retryhttp.Transport's host: each call beyond them in an outage is a call wasted
// and an item's attempt spent (a 10 s outage now costs 3 failures and a probe a second,
// 12 calls; BENCHMARKS.md). A stage that may call nothing over the network keeps
// defaultBreaker's 20, which its items' own failures rarely reach.
const networkOutageAfter = 3

// FlowState is a snapshot of a dependency's flow control, for metrics and operators.
type FlowState struct {
	// Dependency is the dependency's name: the stages' Dependency, or "pipeline/stage".
	Dependency string `json:"dependency"`
	// Rate is the rate calls start at, in calls per second; +Inf in slow start (reported
	// as 0 in JSON).
	Rate float64 `json:"rate"`
	// SlowStart reports that the rate is still ramping up to its first push back.
	SlowStart bool `json:"slow_start"`
	// GateClosedUntil is when the gate reopens, or the zero time when it is open.
	GateClosedUntil time.Time `json:"gate_closed_until,omitzero"`
	// Waited is the total time calls waited on the pace and the gate.
	Waited time.Duration `json:"waited"`
	// Limited is the total time the dependency pushed back every call (no success).
	Limited time.Duration `json:"limited"`
	// Calls is how many calls the flow let start; Waited over Calls is the mean wait.
	Calls int64 `json:"calls"`
}

func (f *flow) state(now time.Time) FlowState {
	r := f.lim.Rate()
	s := FlowState{Dependency: f.name, Rate: r, SlowStart: f.lim.SlowStart(),
		GateClosedUntil: f.gate.ClosedUntil(now), Waited: time.Duration(f.waited.Load()),
		Limited: time.Duration(f.limitedTotal.Load()), Calls: f.paced.Load()}
	if since := f.limitedSince.Load(); since != 0 {
		s.Limited += now.Sub(time.Unix(0, since))
	}
	return s
}

// FlowStates returns the flow control of every dependency of the started client's
// stages, or nil before Start.
func (c *Client) FlowStates() []FlowState {
	c.mu.Lock()
	e := c.eng
	c.mu.Unlock()
	if e == nil {
		return nil
	}
	now := e.cfg.Now()
	out := make([]FlowState, 0, len(e.flowList))
	for _, f := range e.flowList {
		out = append(out, f.state(now))
	}
	return out
}

// buildFlows gives every stage its flow: stages naming one Dependency share it.
func (e *engine) buildFlows() error {
	e.flows = map[StageKey]*flow{}
	byDep := map[string]*flow{}
	ls, _ := e.store.(LimitStore)
	for _, name := range e.names {
		p := e.pipelines[name]
		for _, s := range p.Stages {
			k := StageKey{Pipeline: name, Stage: s.Name}
			if s.RateLimit.Off {
				if s.Breaker != nil {
					e.flows[k] = &flow{name: name + "/" + s.Name, breaker: s.Breaker}
				}
				continue
			}
			dep := s.Dependency
			if dep == "" {
				dep = name + "/" + s.Name
			}
			f := byDep[dep]
			if f != nil {
				if f.limit != s.RateLimit {
					return fmt.Errorf("%w: stages of dependency %q have different rate limits", ErrInvalidPipeline, dep)
				}
				if s.Breaker != nil && f.breaker != s.Breaker {
					return fmt.Errorf("%w: stages of dependency %q have different breakers", ErrInvalidPipeline, dep)
				}
				e.flows[k] = f
				continue
			}
			br := s.Breaker
			if br == nil {
				br = defaultBreaker()
			}
			f = newFlow(dep, s.RateLimit, br, e.cfg.Now)
			f.ownBreaker = s.Breaker == nil
			if ls != nil && s.RateLimit.Rate > 0 {
				f.shared = newSharedPace(ls, dep, s.RateLimit)
			}
			byDep[dep] = f
			e.flows[k] = f
			e.flowList = append(e.flowList, f)
		}
	}
	return nil
}

// pace waits until the flow lets a call of t start: its gate is open, the deployment's
// shared bucket has a token and the pace allows it. It returns false when the item
// must go back unattempted (the gate closed, or the client is stopping).
func (e *engine) pace(t *task) bool {
	f := t.flow
	if f.lim == nil {
		return true
	}
	begin := e.cfg.Now()
	if !f.gate.ClosedUntil(begin).IsZero() {
		return false
	}
	if f.shared != nil {
		if !f.shared.take(e.claimCtx, f, e.cfg.Now) {
			return false
		}
	}
	p, err := f.lim.Wait(e.claimCtx)
	if err != nil {
		return false
	}
	now := e.cfg.Now()
	if d := now.Sub(begin); d > 0 {
		f.waited.Add(int64(d))
	}
	if !f.gate.ClosedUntil(now).IsZero() {
		// The gate closed while this call waited for its turn.
		p.Done()
		return false
	}
	f.paced.Add(1)
	e.notePace(t.lease.Item.RunID, t.lease.Item.Stage, now.Sub(begin))
	t.permit, t.started = p, now
	return true
}

// settle reports an attempt's result to its flow and decides whether a rate-limited
// result is the stage's (the dependency refuses everybody: the item waits for free)
// or the item's own (the dependency accepted a call that started later: a per-key
// quota, paid from the item's allowance).
func (e *engine) settle(t *task, err error, o retry.Outcome, end time.Time) {
	f := t.flow
	if f == nil || f.lim == nil {
		return
	}
	start := t.started.UnixNano()
	switch {
	case err == nil:
		t.permit.Success()
		for {
			cur := f.lastSuccess.Load()
			if cur >= start || f.lastSuccess.CompareAndSwap(cur, start) {
				break
			}
		}
		if f.rounds.Load() != 0 {
			f.rounds.Store(0)
		}
		if f.failingSince.Load() != 0 {
			f.failingSince.Store(0)
		}
		if f.limitedSince.Load() != 0 {
			if since := f.limitedSince.Swap(0); since != 0 {
				f.limitedTotal.Add(end.UnixNano() - since)
			}
		}
	case o.Class == retry.ClassRateLimited:
		cut := t.permit.PushBack()
		if f.lastSuccess.Load() > start {
			return // the item's own limit
		}
		f.limitedSince.CompareAndSwap(0, start)
		if end.Sub(time.Unix(0, f.limitedSince.Load())) > f.maxLimit {
			return // limited for too long: the items pay from now on
		}
		t.stageLimited = true
		n := f.rounds.Load()
		if cut {
			// Rounds of push backs with no success between them: the wait
			// without a Retry-After grows with them.
			n = f.rounds.Add(1)
		}
		if d := o.RetryAfter; d > 0 {
			until := end.Add(d)
			if f.gate.Close(until) {
				f.lim.PauseUntil(until)
				if f.shared != nil {
					f.shared.closeGate(e.bgCtx, until)
				}
			}
			t.stageDelay = d
			return
		}
		if cut {
			// No Retry-After: the stage pauses a moment, as retryhttp.Transport's flow
			// control did before the stage's took it over. Without the pause, the calls
			// whose slots the pace had handed out at the old rate reached a limit still
			// spent, each refused call started after the cut counted as a new round, and
			// the rate fell 56/s → 22/s within a second against a limit of 50/s, then
			// took 30 s to climb back (0.65 C over 3,000 items, BENCHMARKS.md).
			until := end.Add(noRetryAfterPause(n))
			if f.gate.Close(until) {
				f.lim.PauseUntil(until)
			}
		}
		t.stageDelay = t.pipeline.Stages[t.stage].Policy.RateLimitDelay(0, int(min(max(n, 1), 30)))
	case o.Class == retry.ClassRetryable:
		t.permit.Done()
		f.failingSince.CompareAndSwap(0, start)
	default:
		t.permit.Done()
	}
}

// Pause of a stage pushed back without a Retry-After: noRetryAfterFirst after the first
// round refused, doubling with each round refused in a row (the calls refused together
// count once), up to noRetryAfterMax.
const (
	noRetryAfterFirst = 100 * time.Millisecond
	noRetryAfterMax   = 10 * time.Second
)

// noRetryAfterPause is the pause after the n-th round in a row refused without a
// Retry-After.
func noRetryAfterPause(n int64) time.Duration {
	return min(noRetryAfterFirst<<min(max(n-1, 0), 16), noRetryAfterMax)
}

// freeProbe reports whether a failed probe of the stage's breaker is the
// dependency's fault rather than the item's: true until the dependency has failed
// without a success for longer than MaxLimited, so that an outage pauses the stage
// without spending attempts, and a stage that can never succeed still ends its items.
func (f *flow) freeProbe(now time.Time) bool {
	if f.lim == nil {
		return true
	}
	since := f.failingSince.Load()
	return since == 0 || now.Sub(time.Unix(0, since)) <= f.maxLimit
}

// LimitStore is implemented by stores that keep rate limits shared by every process
// using the store, so that a stage's configured rate holds for the whole deployment.
// Each dependency has one pace in the database, a theoretical arrival time as in GCRA
// (the generic cell rate algorithm): a process reserves the next few time slots of the
// pace and starts one call in each, so that the calls of all processes together are
// spaced at the rate. Both the SQLite and the PostgreSQL store implement it.
type LimitStore interface {
	// ReserveSlots reserves req.Want consecutive slots of the named dependency's pace,
	// unless its shared gate is closed at req.Now: then it reserves none and reports
	// when the gate opens.
	ReserveSlots(ctx context.Context, req SlotRequest) (SlotGrant, error)
	// CloseGate closes the named dependency's shared gate until the given time, or
	// leaves it closed until a later time it already had.
	CloseGate(ctx context.Context, name string, until time.Time) error
}

// SlotRequest asks a LimitStore for slots of a dependency's pace.
type SlotRequest struct {
	// Name is the dependency's name.
	Name string
	// Interval is the time between two slots: one second over the rate.
	Interval time.Duration
	// Burst is how many slots may fall at the same time after a quiet spell; at least 1.
	Burst int
	// Want is how many slots to reserve.
	Want int
	// Now is the engine's clock.
	Now time.Time
}

// SlotGrant is a LimitStore's answer to a SlotRequest.
type SlotGrant struct {
	// Granted is how many slots were reserved: Want, or 0 while the gate is closed.
	Granted int
	// Start places the slots: slot i (from 0) begins at Start + i×Interval, or at the
	// request's Now if that is later. Start is before Now after a quiet spell (a burst).
	Start time.Time
	// GateUntil is when the shared gate opens, or the zero time when it is open.
	GateUntil time.Time
}

// Slot computes the start of slot i of g for a request made at now.
func (g SlotGrant) Slot(i int, interval time.Duration, now time.Time) time.Time {
	at := g.Start.Add(time.Duration(i) * interval)
	if at.Before(now) {
		return now
	}
	return at
}

// sharedPace is a process's share of a dependency's deployment-wide pace: slots
// reserved from the store a tenth of a second's worth at a time, each used by one
// call.
type sharedPace struct {
	ls       LimitStore
	name     string
	interval time.Duration
	burst    int
	chunk    int

	mu    sync.Mutex // guards the reserved slots; one goroutine asks the store at a time
	slots []time.Time
}

// sharedChunk is how much of the rate a process reserves at once: few slots, so
// that a process holds little of the pace ahead of the others, yet the store is
// asked about ten times a second at most.
const sharedChunk = 100 * time.Millisecond

func newSharedPace(ls LimitStore, name string, r RateLimit) *sharedPace {
	return &sharedPace{ls: ls, name: name, burst: max(r.Burst, 1),
		interval: time.Duration(float64(time.Second) / r.Rate), chunk: max(1, int(r.Rate*sharedChunk.Seconds()))}
}

// take waits for this process's next slot of the shared pace. It returns false
// when the gate is closed or ctx ends.
func (b *sharedPace) take(ctx context.Context, f *flow, now func() time.Time) bool {
	for failures := 0; ; {
		b.mu.Lock()
		// A slot left unused for longer than an interval is dropped: calls go out
		// only near the times reserved for them.
		for len(b.slots) > 0 && b.slots[0].Before(now().Add(-b.interval)) {
			b.slots = b.slots[1:]
		}
		if len(b.slots) > 0 {
			at := b.slots[0]
			b.slots = b.slots[1:]
			b.mu.Unlock()
			if d := at.Sub(now()); d > 0 && !sleep(ctx, d) {
				return false
			}
			return ctx.Err() == nil
		}
		t := now()
		g, err := b.ls.ReserveSlots(ctx, SlotRequest{Name: b.name, Interval: b.interval, Burst: b.burst, Want: b.chunk, Now: t})
		if err == nil {
			for i := range g.Granted {
				b.slots = append(b.slots, g.Slot(i, b.interval, t))
			}
		}
		b.mu.Unlock()
		switch {
		case err != nil:
			// The store is unreachable: wait, as for any store failure, rather
			// than call without the deployment's consent.
			failures++
			if !sleep(ctx, storeRetry.Delay(failures)) {
				return false
			}
		case !g.GateUntil.IsZero():
			if f.gate.Close(g.GateUntil) {
				f.lim.PauseUntil(g.GateUntil)
			}
			return false
		}
	}
}

func (b *sharedPace) closeGate(ctx context.Context, until time.Time) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = b.ls.CloseGate(cctx, b.name, until)
}

// claimAhead is how much of a paced stage's work is claimed ahead of its pace: enough
// to keep the pace busy between claims, little enough that claimed items do not wait
// long for their turn (nor pile up behind a gate that closes).
const claimAhead = 500 * time.Millisecond

// claimCap returns how many items of a paced stage may be claimed and not finished at
// once, or 0 when the pace does not bound claims (slow start, whose window does).
func (f *flow) claimCap() int {
	r := f.lim.Rate()
	if math.IsInf(r, 1) {
		return 0
	}
	return int(math.Ceil(r*claimAhead.Seconds())) + max(f.limit.Burst, 1)
}
