package redrive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode"

	"go.opentelemetry.io/otel/trace"

	"github.com/redrive/redrive/retry"
)

// Workers in any language work External stages: they lease the stage's
// items from a started client (over HTTP, through `redrive serve`), run
// them, and report each result here. The engine applies the stage's policy
// to those results exactly as to a Go handler's, through the same decide
// and the same store calls, so that retries, classes, attempt caps,
// Retry-After, flow control, breakers, failure budgets, the dead-letter
// queue and events mean the same for both.
//
// An item handed out is started at hand-out: a worker asks only for what
// it can start, so the start is recorded in the same call (by the claim
// itself, or by MarkStarted once a paced stage's slots came), and a worker
// that vanishes costs its items a lost attempt when their leases expire,
// as a crashed process does. Each lease keeps in this
// process the permit it took from the stage's flow and its breaker
// admission until its result, its release or its expiry.

// Limits of external leases.
const (
	// MaxExternalBatch is the most items one LeaseExternal hands out, and
	// the most results one SettleExternal, HeartbeatExternal or
	// ReleaseExternal takes.
	MaxExternalBatch = 1000
	// MaxExternalWait is the longest a LeaseExternal waits for a due item.
	MaxExternalWait = 30 * time.Second
	// MinExternalLease and MaxExternalLease bound the lease a worker may
	// ask for.
	MinExternalLease = time.Second
	MaxExternalLease = time.Hour
	// MaxWorkerName is the longest worker name.
	MaxWorkerName = 128
)

// Errors of external leasing.
var (
	// ErrNotExternal is returned (wrapped) for a stage that is not
	// External: its items are worked inside the engine's processes.
	ErrNotExternal = errors.New("redrive: not an external stage")
	// ErrBadExternalRequest is wrapped by the errors of a request outside
	// its limits; ExternalRequestError says which field.
	ErrBadExternalRequest = errors.New("redrive: bad external work request")
)

// ExternalRequestError is a field of an external work request that cannot
// be right. It wraps ErrBadExternalRequest.
type ExternalRequestError struct {
	// Field names the request field ("max", "wait", "worker", ...).
	Field string
	// Msg says what is wrong with it.
	Msg string
}

func (e *ExternalRequestError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap returns ErrBadExternalRequest.
func (e *ExternalRequestError) Unwrap() error { return ErrBadExternalRequest }

func badExternal(field, format string, a ...any) error {
	return &ExternalRequestError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// ExternalLeaseRequest asks for items of an External stage.
type ExternalLeaseRequest struct {
	// Pipeline and Stage name the stage. Required.
	Pipeline string
	Stage    string
	// Worker names the worker process: its leases carry the name as their
	// owner, and it is recorded in the workers table (redrive workers,
	// GET /api/v1/workers). Required; at most MaxWorkerName characters,
	// no control characters.
	Worker string
	// Host and PID locate the worker, for operators. Default: none.
	Host string
	PID  int
	// Max is the most items to hand out. Default 0: 1; at most
	// MaxExternalBatch.
	Max int
	// Wait is how long to wait for a due item when none is due now: the
	// call returns as soon as one is. Default 0: answer at once; at most
	// MaxExternalWait.
	Wait time.Duration
	// Lease is how long the leases last without a heartbeat. Default 0:
	// Config.LeaseDuration; between MinExternalLease and MaxExternalLease.
	Lease time.Duration
}

// ExternalLease is an item handed out to an external worker.
type ExternalLease struct {
	// Item is the leased item; its Payload is the stage's input.
	Item Item
	// Token is the lease's fencing token: results, heartbeats and
	// releases name the lease by item ID and token.
	Token int64
	// Attempt is the number of this attempt at the stage (Item.Attempt+1).
	Attempt int
	// ExpiresAt is when the lease expires unless heartbeats extend it.
	ExpiresAt time.Time
	// Timeout is the stage's timeout (Stage.Timeout), 0 for none: a worker
	// fails an attempt that runs longer as retryable.
	Timeout time.Duration
	// TraceParent and TraceState are the W3C Trace Context a worker's own
	// spans take as their parent: the attempt's span when the client traces
	// (Config.TracerProvider), else the item's (Item.TraceParent). Empty
	// when neither exists.
	TraceParent string
	TraceState  string
}

// Ref returns the lease's reference.
func (l ExternalLease) Ref() LeaseRef { return LeaseRef{ItemID: l.Item.ID, Token: l.Token} }

// ExternalResult is the result of one leased item.
type ExternalResult struct {
	// Lease names the lease.
	Lease LeaseRef
	// Output is the stage's output when the attempt succeeded: the next
	// stage's input, or the item's result after the last stage.
	Output []byte
	// Failure is set when the attempt failed. Default nil: it succeeded.
	Failure *ExternalFailure
}

// ExternalFailure is how an external attempt failed.
type ExternalFailure struct {
	// Class is the failure's class: retry.ClassRetryable (a retry after
	// the policy's backoff), retry.ClassFinal (dead at once) or
	// retry.ClassRateLimited (the dependency asked to wait RetryAfter).
	Class retry.Class
	// Error is the message recorded with the attempt and, for a dead
	// item, in its reason. Default "": "<class> failure".
	Error string
	// RetryAfter is how long the dependency asked to wait, for a
	// rate-limited failure (capped by Policy.MaxRateLimitWait). Default 0:
	// no hint, the policy's rate-limit backoff applies.
	RetryAfter time.Duration
}

// ExternalSettled is what became of one result, heartbeat or release.
type ExternalSettled struct {
	// ItemID is the lease's item.
	ItemID int64 `json:"id"`
	// Applied reports whether the store took it: false when the lease had
	// expired or been superseded (another lease of the item, or a result
	// already recorded), which changes nothing.
	Applied bool `json:"applied"`
	// Outcome is the attempt's outcome, for an applied result.
	Outcome Outcome `json:"outcome,omitempty"`
	// State is the item's next state, for an applied result.
	State State `json:"state,omitempty"`
	// Delay is the wait before the next attempt, for an applied result
	// that scheduled one.
	Delay time.Duration `json:"delay,omitempty"`
	// Error says why it was not applied.
	Error string `json:"error,omitempty"`
}

// errLeaseGone is the reason of a result or heartbeat that was not applied.
const errLeaseGone = "the lease expired or was superseded: another worker may hold the item, or its result was already recorded"

// extLease is a lease handed out by this process, until its result.
type extLease struct {
	item     Item
	token    int64
	pipeline *Pipeline
	stage    int
	flow     *flow
	permit   retry.Permit
	admitted bool // the breaker allowed it: its result must be recorded there
	probe    bool
	started  time.Time
	expires  time.Time
	worker   string
	span     trace.Span // the attempt's span; nil when tracing is off (trace.go)
}

// externals is the external work of an engine. Its zero value is ready.
type externals struct {
	mu      sync.Mutex
	leases  map[LeaseRef]*extLease
	running map[StageKey]int // leases handed out (or being handed out) and not settled
	workers map[string]*extWorker
	swept   time.Time
	// sig is closed when items may have become due (engine.wake), waking
	// the waiting lease calls; nil while nobody waits.
	sig chan struct{}
}

// extWorker is an external worker seen by this process.
type extWorker struct {
	row      Worker
	recorded time.Time // when its row was last written
}

// signal returns a channel closed at the next wake.
func (x *externals) signal() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sig == nil {
		x.sig = make(chan struct{})
	}
	return x.sig
}

// broadcast wakes the waiting lease calls.
func (x *externals) broadcast() {
	x.mu.Lock()
	if x.sig != nil {
		close(x.sig)
		x.sig = nil
	}
	x.mu.Unlock()
}

// reserve counts n more leases of k as handed out, within the cap
// (0: none), and returns how many it counted.
func (x *externals) reserve(k StageKey, n, cap int) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.running == nil {
		x.running = map[StageKey]int{}
	}
	if cap > 0 {
		n = min(n, cap-x.running[k])
	}
	if n <= 0 {
		return 0
	}
	x.running[k] += n
	return n
}

func (x *externals) unreserveLocked(k StageKey, n int) {
	if x.running[k] -= n; x.running[k] <= 0 {
		delete(x.running, k)
	}
}

func (x *externals) unreserve(k StageKey, n int) {
	x.mu.Lock()
	x.unreserveLocked(k, n)
	x.mu.Unlock()
}

func (x *externals) inFlight(k StageKey) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.running[k]
}

// take removes and returns the lease of ref, nil when this process does
// not hold it.
func (x *externals) take(ref LeaseRef) *extLease {
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.leases[ref]
	if l != nil {
		delete(x.leases, ref)
		x.unreserveLocked(StageKey{Pipeline: l.item.Pipeline, Stage: l.item.Stage}, 1)
	}
	return l
}

// drop ends the flow and breaker accounting, and the span, of a lease that
// ended without a result: released, expired or taken over, as why says.
func (l *extLease) drop(why string) {
	if l.span != nil {
		endReleasedSpan(l.span, why)
	}
	l.permit.Done()
	if l.admitted && l.flow != nil && l.flow.breaker != nil {
		l.flow.breaker.Record(context.Canceled)
	}
}

// sweepInterval is how often expired leases are looked for in memory.
const sweepInterval = time.Second

// sweep forgets the leases that expired (their workers vanished; the
// rescuer charges their attempts), returning their permits.
func (x *externals) sweep(now time.Time) {
	x.mu.Lock()
	if now.Sub(x.swept) < sweepInterval {
		x.mu.Unlock()
		return
	}
	x.swept = now
	var gone []*extLease
	for ref, l := range x.leases {
		if now.After(l.expires) {
			gone = append(gone, l)
			delete(x.leases, ref)
			x.unreserveLocked(StageKey{Pipeline: l.item.Pipeline, Stage: l.item.Stage}, 1)
		}
	}
	x.mu.Unlock()
	for _, l := range gone {
		l.drop("lease expired")
	}
}

func (c *Client) engine() (*engine, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.eng == nil {
		return nil, ErrNotStarted
	}
	return c.eng, nil
}

// externalStage finds an External stage of a registered pipeline.
func (e *engine) externalStage(pipeline, stage string) (*Pipeline, int, error) {
	p := e.pipelines[pipeline]
	if p == nil {
		return nil, 0, fmt.Errorf("%w: %q", ErrUnknownPipeline, pipeline)
	}
	i := p.stageIndex(stage)
	if i < 0 {
		return nil, 0, fmt.Errorf("%w: pipeline %q has no stage %q", ErrNotExternal, pipeline, stage)
	}
	if !p.Stages[i].External {
		return nil, 0, fmt.Errorf("%w: stage %q of pipeline %q is worked by the engine's own workers", ErrNotExternal, stage, pipeline)
	}
	return p, i, nil
}

func checkWorker(name string, required bool) error {
	if name == "" {
		if required {
			return badExternal("worker", "name the worker (e.g. host:pid)")
		}
		return nil
	}
	if len(name) > MaxWorkerName {
		return badExternal("worker", "longer than %d characters", MaxWorkerName)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return badExternal("worker", "contains a control character")
		}
	}
	return nil
}

// seen records that an external worker is alive: in the workers table at
// most once a second per worker, so that operators see it with its leases.
func (e *engine) seen(ctx context.Context, name, host string, pid int, pipeline string, lease time.Duration) {
	if name == "" {
		return
	}
	now := e.cfg.Now()
	x := &e.ext
	x.mu.Lock()
	if x.workers == nil {
		x.workers = map[string]*extWorker{}
	}
	w := x.workers[name]
	if w == nil {
		w = &extWorker{row: Worker{Owner: name, StartedAt: now}}
		x.workers[name] = w
	}
	if host != "" {
		w.row.Host = host
	}
	if pid != 0 {
		w.row.PID = pid
	}
	changed := false
	if pipeline != "" && !slices.Contains(w.row.Pipelines, pipeline) {
		w.row.Pipelines = append(w.row.Pipelines, pipeline)
		slices.Sort(w.row.Pipelines)
		changed = true
	}
	if !changed && now.Sub(w.recorded) < time.Second {
		x.mu.Unlock()
		return
	}
	w.recorded = now
	// A worker asks for work at least every MaxExternalWait and heartbeats
	// its leases: its row stays live across both, and goes stale soon
	// after it stops.
	w.row.LastSeen = now
	w.row.ExpiresAt = now.Add(max(lease, MaxExternalWait) + workerMinLive)
	row := w.row
	row.Pipelines = slices.Clone(row.Pipelines)
	x.mu.Unlock()
	if err := e.store.UpsertWorker(ctx, row); err != nil && ctx.Err() == nil {
		e.log.Warn("redrive: recording an external worker failed", "worker", name, "err", err)
	}
}

// RemoveExternalWorker removes the workers-table row of an external worker
// that stops, as a started client removes its own. Only a worker this
// client has seen (by LeaseExternal, SettleExternal, HeartbeatExternal or
// ReleaseExternal) is removed; it reports whether it was.
func (c *Client) RemoveExternalWorker(ctx context.Context, name string) (bool, error) {
	e, err := c.engine()
	if err != nil {
		return false, err
	}
	e.ext.mu.Lock()
	_, ok := e.ext.workers[name]
	delete(e.ext.workers, name)
	e.ext.mu.Unlock()
	if !ok {
		return false, nil
	}
	if err := e.store.RemoveWorker(ctx, name); err != nil {
		return false, fmt.Errorf("redrive: remove worker %q: %w", name, err)
	}
	return true, nil
}

// externalPoll is how often a waiting lease call looks for due items of a
// store that sends no notifications.
const externalPoll = 25 * time.Millisecond

// externalRetryGap is the least time between two looks of one waiting lease
// call: wakes come at every batch of completions of a busy process, and
// many waiting workers should not turn each into as many empty claims.
const externalRetryGap = 5 * time.Millisecond

// handoutAhead bounds the items of a paced stage handed out in one call:
// those whose start the pace allows within this long, so that the items a
// worker starts together stay close to the pace.
const handoutAhead = 20 * time.Millisecond

// LeaseExternal hands out up to req.Max due items of an External stage to
// an external worker, waiting up to req.Wait for one to be due. Each item's
// attempt is recorded as started. The stage's flow control bounds what is
// handed out (its pace, its gate, its slow-start window), as do its breaker,
// its Concurrency (leases in flight from this client) and operators'
// pauses. It returns no leases, and no error, when none was due in time.
func (c *Client) LeaseExternal(ctx context.Context, req ExternalLeaseRequest) ([]ExternalLease, error) {
	e, err := c.engine()
	if err != nil {
		return nil, err
	}
	p, si, err := e.externalStage(req.Pipeline, req.Stage)
	if err != nil {
		return nil, err
	}
	if err := checkWorker(req.Worker, true); err != nil {
		return nil, err
	}
	switch {
	case req.Max < 0 || req.Max > MaxExternalBatch:
		return nil, badExternal("max", "%d is out of range: give 1 to %d", req.Max, MaxExternalBatch)
	case req.Wait < 0 || req.Wait > MaxExternalWait:
		return nil, badExternal("wait", "%v is out of range: give 0 to %v", req.Wait, MaxExternalWait)
	case req.Lease != 0 && (req.Lease < MinExternalLease || req.Lease > MaxExternalLease):
		return nil, badExternal("lease", "%v is out of range: give %v to %v", req.Lease, MinExternalLease, MaxExternalLease)
	}
	if req.Max == 0 {
		req.Max = 1
	}
	if req.Lease == 0 {
		req.Lease = e.cfg.LeaseDuration
	}
	e.seen(ctx, req.Worker, req.Host, req.PID, req.Pipeline, req.Lease)

	// Store calls end with the request or the client's stop; the wait for
	// a due item also ends after req.Wait.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(e.claimCtx, cancel)
	defer stop()
	waitCtx, cancelWait := context.WithTimeout(ctx, req.Wait)
	defer cancelWait()
	poll := e.cfg.PollInterval
	if _, ok := e.store.(Notifier); !ok {
		poll = min(poll, externalPoll)
	}
	for {
		sig := e.ext.signal()
		begin := e.cfg.Now()
		leases, retryAt, err := e.leaseOnce(ctx, waitCtx, p, si, req)
		if err != nil || len(leases) > 0 {
			return leases, err
		}
		if waitCtx.Err() != nil {
			return nil, nil
		}
		wait := poll
		if !retryAt.IsZero() {
			wait = min(wait, max(retryAt.Sub(e.cfg.Now()), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-waitCtx.Done():
		case <-sig:
		case <-t.C:
		}
		t.Stop()
		if waitCtx.Err() != nil {
			return nil, nil
		}
		if d := externalRetryGap - e.cfg.Now().Sub(begin); d > 0 && !sleep(waitCtx, d) {
			return nil, nil
		}
	}
}

// leaseOnce hands out what is due of the stage now. retryAt, when not zero,
// is when the stage may hand out again (a gate that opens). Store calls
// use ctx; a stage in slow start waits for room in its window until
// waitCtx ends.
func (e *engine) leaseOnce(ctx, waitCtx context.Context, p *Pipeline, si int, req ExternalLeaseRequest) (_ []ExternalLease, retryAt time.Time, _ error) {
	st := &p.Stages[si]
	k := StageKey{Pipeline: p.Name, Stage: st.Name}
	f := e.flows[k]
	now := e.cfg.Now()
	e.ext.sweep(now)
	if _, ok := e.withoutPaused(ClaimRequest{Only: []StageKey{k}}, now); !ok {
		return nil, time.Time{}, nil // paused by an operator
	}
	n, capacity := req.Max, st.Concurrency
	var br *retry.Breaker
	if f != nil {
		br = f.breaker
	}
	if br != nil {
		switch br.State() {
		case retry.BreakerOpen:
			return nil, time.Time{}, nil
		case retry.BreakerHalfOpen:
			// One probe at a time: the breaker decides when to close.
			if e.ext.inFlight(k) > 0 {
				return nil, time.Time{}, nil
			}
			n, capacity = 1, 1
		}
	}
	paced := false
	if f != nil && f.lim != nil {
		if until := f.gate.ClosedUntil(now); !until.IsZero() {
			return nil, until, nil // the dependency asked everybody to wait
		}
		if c := f.claimCap(); c > 0 {
			paced = true
			capacity = minCap(capacity, c)
			n = min(n, int(f.lim.Rate()*handoutAhead.Seconds())+max(f.limit.Burst, 1))
		}
	}
	// Permits of a stage in slow start are taken before the claim, as many
	// as its window has room for; waiting for them takes nothing from
	// anybody. A paced stage's items are claimed first and then wait for
	// their slots, as the engine's own claims do, because reserving a
	// slot for an item that may not be there would spend the pace.
	var permits []retry.Permit
	if f != nil && f.lim != nil && !paced {
		permits = e.slowPermits(waitCtx, f, n)
		if len(permits) == 0 {
			return nil, time.Time{}, nil
		}
		n = len(permits)
	}
	n = e.ext.reserve(k, n, capacity)
	if n == 0 {
		for _, pm := range permits {
			pm.Done()
		}
		return nil, time.Time{}, nil
	}
	// Handed out is started: the worker asked only for what it can start.
	// Items of a stage that is not paced start now, and the claim records
	// it; a paced stage's items start when their slots come (below).
	var startedAt time.Time
	if !paced {
		startedAt = now
	}
	claimed, err := e.store.Claim(ctx, ClaimRequest{Owner: req.Worker, Pipelines: []string{p.Name}, Only: []StageKey{k},
		Limit: n, LeaseUntil: now.Add(req.Lease), Now: now, StartedAt: startedAt})
	if err != nil {
		e.ext.unreserve(k, n)
		for _, pm := range permits {
			pm.Done()
		}
		if ctx.Err() != nil {
			return nil, time.Time{}, nil
		}
		return nil, time.Time{}, fmt.Errorf("redrive: lease external work: %w", err)
	}
	e.ext.unreserve(k, n-len(claimed))
	for _, pm := range permits[min(len(claimed), len(permits)):] {
		pm.Done()
	}
	if len(claimed) == 0 {
		return nil, time.Time{}, nil
	}
	ls := make([]*extLease, 0, len(claimed))
	var back []LeaseRef
	// Claimed items of a paced stage wait for their slots at most half
	// their lease: the cap keeps that wait near handoutAhead, unless many
	// workers ask at once.
	slotCtx, cancelSlots := context.WithTimeout(ctx, req.Lease/2)
	defer cancelSlots()
	for i, cl := range claimed {
		l := &extLease{item: cl.Item, token: cl.Token, pipeline: p, stage: si, flow: f, worker: req.Worker}
		if paced {
			pm, waited, ok := e.pacePermit(slotCtx, f)
			if ok {
				e.notePace(cl.Item.RunID, cl.Item.Stage, waited)
			}
			if !ok {
				// The request ended or the gate closed while this item waited
				// for its slot: it and the rest go back unattempted.
				for _, c := range claimed[i:] {
					back = append(back, c.Ref())
				}
				break
			}
			l.permit = pm
		} else if i < len(permits) {
			l.permit = permits[i]
		}
		if br != nil {
			if br.Allow() != nil {
				l.permit.Done()
				back = append(back, cl.Ref())
				continue
			}
			l.admitted = true
			l.probe = br.State() == retry.BreakerHalfOpen && f.freeProbe(e.cfg.Now())
		}
		ls = append(ls, l)
	}
	if len(back) > 0 {
		e.ext.unreserve(k, len(back))
		if err := e.store.Release(context.WithoutCancel(ctx), back, e.cfg.Now()); err != nil {
			e.log.Warn("redrive: returning external leases failed; they return when their lease expires", "items", len(back), "err", err)
		}
	}
	if len(ls) == 0 {
		return nil, time.Time{}, nil
	}
	start := now
	if paced {
		start = e.cfg.Now()
	}
	for _, l := range ls {
		l.started = start
	}
	mctx := context.WithoutCancel(ctx)
	var lost []int64
	if paced {
		if lost, err = e.markExternalStarts(mctx, ls, start); err != nil {
			// Without a recorded start a worker that dies would not be
			// charged: give the items back rather than hand them out.
			refs := make([]LeaseRef, len(ls))
			for i, l := range ls {
				refs[i] = LeaseRef{ItemID: l.item.ID, Token: l.token}
				l.drop("not handed out: recording the start failed")
			}
			e.ext.unreserve(k, len(ls))
			_ = e.store.Release(mctx, refs, e.cfg.Now())
			return nil, time.Time{}, fmt.Errorf("redrive: lease external work: record starts: %w", err)
		}
	}
	until := now.Add(req.Lease)
	if start.Sub(now) > req.Lease/4 {
		// The items waited for their slots a good part of their lease.
		until = start.Add(req.Lease)
		refs := make([]LeaseRef, len(ls))
		for i, l := range ls {
			refs[i] = LeaseRef{ItemID: l.item.ID, Token: l.token}
		}
		more, err := e.store.Heartbeat(mctx, refs, until)
		if err != nil {
			until = now.Add(req.Lease)
		}
		lost = append(lost, more...)
	}
	gone := make(map[int64]bool, len(lost))
	for _, id := range lost {
		gone[id] = true
	}
	if e.tracer != nil {
		for _, l := range ls {
			if !gone[l.item.ID] {
				_, l.span = startAttemptSpan(ctx, e.tracer, &l.item, req.Worker, start)
			}
		}
	}
	out := make([]ExternalLease, 0, len(ls))
	e.ext.mu.Lock()
	if e.ext.leases == nil {
		e.ext.leases = map[LeaseRef]*extLease{}
	}
	dropped := 0
	for _, l := range ls {
		if gone[l.item.ID] {
			dropped++
			continue
		}
		l.expires = until
		e.ext.leases[LeaseRef{ItemID: l.item.ID, Token: l.token}] = l
		el := ExternalLease{Item: l.item, Token: l.token, Attempt: l.item.Attempt + 1, ExpiresAt: until, Timeout: st.Timeout,
			TraceParent: l.item.TraceParent, TraceState: l.item.TraceState}
		if l.span != nil {
			el.TraceParent, el.TraceState = spanHeaders(l.span.SpanContext())
		}
		out = append(out, el)
	}
	e.ext.unreserveLocked(k, dropped)
	e.ext.mu.Unlock()
	for _, l := range ls {
		if gone[l.item.ID] {
			l.drop("lease lost before it was handed out")
			continue
		}
		if st.Policy.Budget != nil && l.item.Attempt == 0 && l.item.RateLimitWaits == 0 {
			st.Policy.Budget.OnRequest()
		}
	}
	return out, time.Time{}, nil
}

// markExternalStarts records the start of leases whose claim did not: a
// paced stage's, after their slots came. It returns the items whose lease
// was lost meanwhile.
func (e *engine) markExternalStarts(ctx context.Context, ls []*extLease, start time.Time) ([]int64, error) {
	marks := make([]StartMark, len(ls))
	for i, l := range ls {
		marks[i] = StartMark{Lease: LeaseRef{ItemID: l.item.ID, Token: l.token}, At: start}
	}
	return e.store.MarkStarted(ctx, marks)
}

// minCap is the smaller of two caps, where 0 means none.
func minCap(a, b int) int {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// slowPermits takes up to n permits of a flow in slow start: those its
// window has room for now, or, when it has none, the first one to come
// before ctx ends.
func (e *engine) slowPermits(ctx context.Context, f *flow, n int) []retry.Permit {
	now, cancel := context.WithCancel(ctx)
	cancel() // a done context: Wait takes a permit only if one is free
	var out []retry.Permit
	for len(out) < n {
		pm, err := f.lim.Wait(now)
		if err != nil {
			break
		}
		out = append(out, pm)
	}
	if len(out) == 0 {
		pm, err := f.lim.Wait(ctx)
		if err != nil {
			return nil
		}
		out = append(out, pm)
	}
	return out
}

// pacePermit waits for the next slot of a paced flow, as pace does for the
// engine's own calls; false when ctx ended or the gate closed.
func (e *engine) pacePermit(ctx context.Context, f *flow) (retry.Permit, time.Duration, bool) {
	begin := e.cfg.Now()
	if f.shared != nil && !f.shared.take(ctx, f, e.cfg.Now) {
		return retry.Permit{}, 0, false
	}
	pm, err := f.lim.Wait(ctx)
	if err != nil {
		return retry.Permit{}, 0, false
	}
	now := e.cfg.Now()
	if d := now.Sub(begin); d > 0 {
		f.waited.Add(int64(d))
	}
	if !f.gate.ClosedUntil(now).IsZero() || f.breaker != nil && f.breaker.State() == retry.BreakerOpen {
		// The gate closed, or the breaker opened, while this item waited
		// for its turn: it would go out into what stopped the others.
		pm.Done()
		return retry.Permit{}, 0, false
	}
	f.paced.Add(1)
	return pm, now.Sub(begin), true
}

// SettleExternal records the results of leased items, in one store
// transaction: each under its stage's policy, as the engine records its own
// handlers' results. A result applies only while its lease is current;
// one whose lease expired or was superseded (a second result for one lease
// included) is reported not applied and changes nothing. worker, when set,
// keeps the worker's row live.
func (c *Client) SettleExternal(ctx context.Context, worker string, results []ExternalResult) ([]ExternalSettled, error) {
	e, err := c.engine()
	if err != nil {
		return nil, err
	}
	if err := checkWorker(worker, false); err != nil {
		return nil, err
	}
	if len(results) > MaxExternalBatch {
		return nil, badExternal("results", "%d results: give at most %d a request", len(results), MaxExternalBatch)
	}
	for i, r := range results {
		if r.Failure != nil {
			switch r.Failure.Class {
			case retry.ClassRetryable, retry.ClassFinal, retry.ClassRateLimited:
			default:
				return nil, badExternal(fmt.Sprintf("[%d].class", i), "want retryable, final or rate_limited")
			}
			if r.Failure.RetryAfter < 0 {
				return nil, badExternal(fmt.Sprintf("[%d].retry_after", i), "must not be negative")
			}
		}
	}
	e.seen(ctx, worker, "", 0, "", 0)
	out := make([]ExternalSettled, len(results))
	var comps []Completion
	var tasks []*task
	var spans []trace.Span // the tasks' attempt spans, nil when tracing is off
	var idx []int
	seen := make(map[LeaseRef]bool, len(results))
	for i, r := range results {
		out[i].ItemID = r.Lease.ItemID
		if seen[r.Lease] {
			out[i].Error = errLeaseGone
			continue
		}
		seen[r.Lease] = true
		t, admitted, span, err := e.externalTask(ctx, r.Lease)
		if err != nil {
			return nil, err
		}
		if t == nil {
			out[i].Error = errLeaseGone
			continue
		}
		e.settleExternal(t, admitted, r)
		comps = append(comps, t.comp)
		tasks = append(tasks, t)
		spans = append(spans, span)
		idx = append(idx, i)
	}
	if len(comps) == 0 {
		return out, nil
	}
	applied, err := e.store.Complete(ctx, comps)
	if err != nil {
		// Nothing was recorded: the worker sends the results again, and
		// meanwhile the leases stand (or expire and are rescued).
		for _, span := range spans {
			if span != nil {
				endReleasedSpan(span, "result not recorded: the store failed")
			}
		}
		return nil, fmt.Errorf("redrive: record external results: %w", err)
	}
	advanced := false
	for j, t := range tasks {
		i := idx[j]
		if !applied[j] {
			if spans[j] != nil {
				endReleasedSpan(spans[j], "result not applied: "+errLeaseGone)
			}
			out[i].Error = errLeaseGone
			continue
		}
		if spans[j] != nil {
			endAttemptSpan(spans[j], &t.comp.Record, t.comp.Now)
		}
		out[i].Applied = true
		out[i].Outcome, out[i].State = t.comp.Record.Outcome, t.comp.State
		if t.comp.State == StatePending {
			out[i].Delay = t.comp.NextAt.Sub(t.comp.Now)
			advanced = advanced || !t.comp.NextAt.After(t.comp.Now)
		}
		for _, ev := range t.events {
			e.c.emit(ev)
		}
	}
	if advanced {
		e.wake()
	}
	return out, nil
}

// externalTask makes the engine's task for a lease named in a result: from
// what this process handed out, or else (another process handed it out, or
// this one restarted since) from the item as stored, whose completion the
// store then fences by the token. nil when the lease cannot be current.
// admitted reports that the stage's breaker let the lease through here, so
// that its result must be recorded there. span is the attempt's span, when
// this process handed the lease out and traces.
func (e *engine) externalTask(ctx context.Context, ref LeaseRef) (_ *task, admitted bool, span trace.Span, _ error) {
	if l := e.ext.take(ref); l != nil {
		return &task{lease: &Lease{Item: l.item, Token: l.token}, pipeline: l.pipeline, stage: l.stage,
			flow: l.flow, permit: l.permit, probe: l.probe, started: l.started, startedAt: l.started}, l.admitted, l.span, nil
	}
	it, err := e.store.GetItem(ctx, ref.ItemID)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil, nil
	}
	if err != nil {
		return nil, false, nil, fmt.Errorf("redrive: record external results: %w", err)
	}
	if it.State != StateRunning {
		return nil, false, nil, nil
	}
	p, si, err := e.externalStage(it.Pipeline, it.Stage)
	if err != nil {
		return nil, false, nil, nil
	}
	started := it.AttemptStartedAt
	if started.IsZero() {
		started = e.cfg.Now()
	}
	// No permit or breaker admission was taken here: the result still
	// tells the flow about the dependency (a push back closes its gate).
	return &task{lease: &Lease{Item: it, Token: ref.Token}, pipeline: p, stage: si, flow: e.flows[StageKey{Pipeline: p.Name, Stage: it.Stage}],
		started: started, startedAt: started}, false, nil, nil
}

// settleExternal decides what follows an external result, as attempt does
// for a handler's.
func (e *engine) settleExternal(t *task, admitted bool, r ExternalResult) {
	st := &t.pipeline.Stages[t.stage]
	end := e.cfg.Now()
	var err error
	var out []byte
	if r.Failure == nil {
		out = r.Output
	} else {
		msg := r.Failure.Error
		if msg == "" {
			msg = r.Failure.Class.String() + " failure"
		}
		base := errors.New(msg)
		switch r.Failure.Class {
		case retry.ClassFinal:
			err = retry.Final(base)
		case retry.ClassRateLimited:
			err = retry.RateLimited(base, r.Failure.RetryAfter)
		default:
			err = retry.Retryable(base)
		}
	}
	var o retry.Outcome
	if err != nil {
		o = classify(st.Policy, err)
	}
	// A breaker records the results of the calls it let through, and of
	// calls handed out elsewhere while it is closed (failures in a row).
	if br := t.flowBreaker(); br != nil && (admitted || br.State() == retry.BreakerClosed) {
		paused := br.State() != retry.BreakerClosed
		answered := err == nil || o.Class == retry.ClassRateLimited
		if answered {
			br.Record(nil)
		} else {
			br.Record(err)
		}
		if answered && paused {
			// The dependency is back (see attempt): close the breaker
			// rather than wait for the next probe.
			if br.State() == retry.BreakerOpen {
				br.Reset()
			}
			if br.State() == retry.BreakerClosed {
				e.wake()
			}
		}
	}
	e.settle(t, err, o, end)
	e.decide(t, st.Policy, out, err, o, t.started, end)
}

func (t *task) flowBreaker() *retry.Breaker {
	if t.flow == nil {
		return nil
	}
	return t.flow.breaker
}

// HeartbeatExternal extends leases handed out to external workers to lease
// from now (default 0: Config.LeaseDuration; else between MinExternalLease
// and MaxExternalLease), and returns when they now expire and, for each,
// whether it was extended: a lease that expired or was superseded is not,
// and its worker should stop working on it.
func (c *Client) HeartbeatExternal(ctx context.Context, worker string, refs []LeaseRef, lease time.Duration) (time.Time, []ExternalSettled, error) {
	e, err := c.engine()
	if err != nil {
		return time.Time{}, nil, err
	}
	if err := checkWorker(worker, false); err != nil {
		return time.Time{}, nil, err
	}
	switch {
	case len(refs) > MaxExternalBatch:
		return time.Time{}, nil, badExternal("leases", "%d leases: give at most %d a request", len(refs), MaxExternalBatch)
	case lease != 0 && (lease < MinExternalLease || lease > MaxExternalLease):
		return time.Time{}, nil, badExternal("lease", "%v is out of range: give %v to %v", lease, MinExternalLease, MaxExternalLease)
	}
	if lease == 0 {
		lease = e.cfg.LeaseDuration
	}
	e.seen(ctx, worker, "", 0, "", lease)
	now := e.cfg.Now()
	until := now.Add(lease)
	refs = uniqueRefs(refs)
	// The store answers by item: two leases of one item (a stale and a
	// current one) go in separate calls.
	gone := make(map[LeaseRef]bool)
	for rest := refs; len(rest) > 0; {
		var round, next []LeaseRef
		ids := make(map[int64]bool, len(rest))
		for _, r := range rest {
			if ids[r.ItemID] {
				next = append(next, r)
				continue
			}
			ids[r.ItemID] = true
			round = append(round, r)
		}
		lost, err := e.store.Heartbeat(ctx, round, until)
		if err != nil {
			return time.Time{}, nil, fmt.Errorf("redrive: heartbeat external leases: %w", err)
		}
		lostIDs := make(map[int64]bool, len(lost))
		for _, id := range lost {
			lostIDs[id] = true
		}
		for _, r := range round {
			gone[r] = lostIDs[r.ItemID]
		}
		rest = next
	}
	out := make([]ExternalSettled, len(refs))
	var dropped []*extLease
	e.ext.mu.Lock()
	for i, r := range refs {
		out[i] = ExternalSettled{ItemID: r.ItemID, Applied: !gone[r]}
		l := e.ext.leases[r]
		switch {
		case gone[r]:
			out[i].Error = errLeaseGone
			if l != nil {
				delete(e.ext.leases, r)
				e.ext.unreserveLocked(StageKey{Pipeline: l.item.Pipeline, Stage: l.item.Stage}, 1)
				dropped = append(dropped, l)
			}
		case l != nil:
			l.expires = until
		}
	}
	e.ext.mu.Unlock()
	for _, l := range dropped {
		l.drop("lease lost: it expired or was superseded")
	}
	return until, out, nil
}

// uniqueRefs drops repeated leases, whose answers by item ID would be
// ambiguous.
func uniqueRefs(refs []LeaseRef) []LeaseRef {
	seen := make(map[LeaseRef]bool, len(refs))
	out := refs[:0:0]
	for _, r := range refs {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

// ReleaseExternal returns leased items unworked: each goes back to pending,
// due now, with no attempt charged, for another worker (a worker that stops
// before it started them). A lease no longer current is left alone.
func (c *Client) ReleaseExternal(ctx context.Context, worker string, refs []LeaseRef) error {
	e, err := c.engine()
	if err != nil {
		return err
	}
	if err := checkWorker(worker, false); err != nil {
		return err
	}
	if len(refs) > MaxExternalBatch {
		return badExternal("leases", "%d leases: give at most %d a request", len(refs), MaxExternalBatch)
	}
	e.seen(ctx, worker, "", 0, "", 0)
	refs = uniqueRefs(refs)
	if err := e.store.Release(ctx, refs, e.cfg.Now()); err != nil {
		return fmt.Errorf("redrive: release external leases: %w", err)
	}
	for _, r := range refs {
		if l := e.ext.take(r); l != nil {
			l.drop("released unworked by the worker")
		}
	}
	e.wake()
	return nil
}
