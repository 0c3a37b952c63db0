package redrive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redrive/redrive/retry"
)

// engine is a started client: a claimer, workers, a completer, a
// heartbeat, a rescuer and a run monitor.
type engine struct {
	c         *Client
	store     Store
	cfg       Config
	log       *slog.Logger
	pipelines map[string]*Pipeline
	names     []string

	claimCtx    context.Context // ends when Stop begins: no more claims
	stopClaim   context.CancelFunc
	workCtx     context.Context // ends at Stop's deadline: handlers are interrupted
	layerCtx    context.Context // workCtx marked as an outer retry layer
	stopWork    context.CancelFunc
	bgCtx       context.Context // ends when everything is flushed
	flushCtx    context.Context // bounds writing completions: ends soon after Stop's deadline
	stopFlush   context.CancelFunc
	stopBG      context.CancelFunc
	work        chan *task
	completions chan *task
	wakeCh      chan struct{}

	mu       sync.Mutex
	inflight map[int64]*task // by item ID: claimed and not yet completed
	running  map[StageKey]int
	aborted  map[int64]string // run ID -> abort reason
	breakers map[StageKey]retry.BreakerState

	stopOnce sync.Once
	stopped  chan struct{} // closed when a Stop has finished
	stopErr  error

	claimers  sync.WaitGroup
	workers   sync.WaitGroup
	completer sync.WaitGroup
	bg        sync.WaitGroup
}

// task is one leased item on its way through a worker and the completer.
type task struct {
	lease    Lease
	pipeline *Pipeline
	stage    int // index in pipeline.Stages, -1 when unknown
	comp     Completion
	release  bool // return the lease without an attempt
	probe    bool // a half-open breaker's probe: its failure is the dependency's
	events   []Event
	// cancel interrupts the running handler; lost records that the lease
	// was taken over. Both are guarded by engine.mu.
	cancel context.CancelFunc
	lost   bool
}

func (t *task) key() StageKey {
	return StageKey{Pipeline: t.lease.Item.Pipeline, Stage: t.lease.Item.Stage}
}

// Start starts working the registered pipelines' items. It returns at once;
// the work goes on until Stop. ctx bounds the start itself and, when it
// ends, stops the client as Stop would with no grace period.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.eng != nil {
		return ErrStarted
	}
	e := &engine{
		c: c, store: c.store, cfg: c.cfg, log: c.cfg.Logger,
		pipelines: map[string]*Pipeline{},
		inflight:  map[int64]*task{},
		running:   map[StageKey]int{},
		aborted:   map[int64]string{},
		breakers:  map[StageKey]retry.BreakerState{},
		wakeCh:    make(chan struct{}, 1),
		stopped:   make(chan struct{}),
	}
	for n, p := range c.pipelines {
		e.pipelines[n] = p
		e.names = append(e.names, n)
	}
	e.claimCtx, e.stopClaim = context.WithCancel(context.WithoutCancel(ctx))
	e.workCtx, e.stopWork = context.WithCancel(context.WithoutCancel(ctx))
	e.layerCtx = retry.Layer(e.workCtx)
	e.bgCtx, e.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	e.flushCtx, e.stopFlush = context.WithCancel(e.bgCtx)
	// Items claimed and not yet recorded: the workers' own, and room for
	// two claim batches, so that the claimer takes the next batch while
	// the completers still write the last one. With room for one batch,
	// claiming waited for completions to be written, and the PostgreSQL
	// benchmark (200,000 no-op items, 64 workers, batch 512) worked
	// 16-18k items/s instead of 23-31k.
	capacity := c.cfg.Workers + 2*c.cfg.ClaimBatch
	e.work = make(chan *task, capacity)
	e.completions = make(chan *task, capacity)

	for range c.cfg.Writers {
		e.completer.Add(1)
		go e.completeLoop()
	}
	for range c.cfg.Workers {
		e.workers.Add(1)
		go e.workLoop()
	}
	if len(e.names) > 0 {
		e.claimers.Add(1)
		go e.claimLoop(capacity)
		e.bg.Add(2)
		go e.heartbeatLoop()
		go e.rescueLoop()
	}
	e.bg.Add(1)
	go e.monitorLoop()
	if n, ok := c.store.(Notifier); ok {
		ch := n.Notifications(e.claimCtx)
		e.bg.Add(1)
		go func() {
			defer e.bg.Done()
			for range ch {
				e.wake()
			}
		}()
	}
	c.eng = e
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				sctx, cancel := context.WithCancel(context.Background())
				cancel()
				_ = c.Stop(sctx)
			case <-e.bgCtx.Done():
			}
		}()
	}
	return nil
}

// Stop stops claiming, lets running attempts finish until ctx ends, then
// interrupts them and returns the leases of whatever did not finish to
// pending, so nothing waits for a lease to expire. Items claimed but not
// started are returned at once.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	e := c.eng
	c.mu.Unlock()
	if e == nil {
		return ErrNotStarted
	}
	// Concurrent calls (say, Start's context ending while the program
	// stops the client) stop it once; the others wait for that stop.
	first := false
	e.stopOnce.Do(func() {
		first = true
		e.stopErr = e.stop(ctx)
		c.mu.Lock()
		c.eng = nil
		c.mu.Unlock()
		close(e.stopped)
	})
	if !first {
		select {
		case <-e.stopped:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return e.stopErr
}

func (e *engine) stop(ctx context.Context) error {
	e.stopClaim()
	// Completions still being written when ctx ends get a short grace;
	// after it, an unreachable store cannot hold Stop: those items' leases
	// expire and the rescuer repeats their attempts.
	stopFlushLater := context.AfterFunc(ctx, func() { time.AfterFunc(stopFlushGrace, e.stopFlush) })
	defer stopFlushLater()
	e.claimers.Wait()
	close(e.work)
	done := make(chan struct{})
	go func() { e.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		e.stopWork()
		<-done
	}
	e.stopWork()
	close(e.completions)
	e.completer.Wait()
	e.stopBG()
	e.bg.Wait()
	// Anything still in flight (a completion that could not be written)
	// is released so another worker takes it at once.
	e.mu.Lock()
	var refs []LeaseRef
	for _, t := range e.inflight {
		refs = append(refs, t.lease.Ref())
	}
	e.mu.Unlock()
	var err error
	if len(refs) > 0 {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = e.store.Release(rctx, refs, e.cfg.Now())
		cancel()
	}
	if err != nil {
		return fmt.Errorf("redrive: stop: release leases: %w", err)
	}
	return nil
}

func (e *engine) wake() {
	select {
	case e.wakeCh <- struct{}{}:
	default:
	}
}

// stopFlushGrace is how long Stop waits for completions to be written
// after its context ended.
const stopFlushGrace = 2 * time.Second

// storeRetry is the policy for store calls that failed (a lost database
// connection, a busy SQLite file): quick at first, capped at 5 s.
var storeRetry = retry.Policy{MaxAttempts: 1 << 30, BaseDelay: 50 * time.Millisecond, MaxDelay: 5 * time.Second}

func (e *engine) claimLoop(capacity int) {
	defer e.claimers.Done()
	failures := 0
	for {
		if e.claimCtx.Err() != nil {
			return
		}
		free := capacity - e.inflightCount()
		got, full := 0, false
		if free >= min(e.cfg.ClaimBatch, capacity)/2 || free >= capacity/2 {
			n, err := e.claim(min(free, e.cfg.ClaimBatch))
			if err != nil {
				failures++
				d := storeRetry.Delay(failures)
				e.log.Warn("redrive: claim failed", "err", err, "retry_in", d)
				if !sleep(e.claimCtx, d) {
					return
				}
				continue
			}
			failures = 0
			got, full = n, n == min(free, e.cfg.ClaimBatch)
		}
		if got > 0 && full {
			continue
		}
		t := time.NewTimer(e.cfg.PollInterval)
		select {
		case <-e.claimCtx.Done():
			t.Stop()
			return
		case <-e.wakeCh:
		case <-t.C:
		}
		t.Stop()
	}
}

// claim claims up to limit items, honouring breakers and stage
// concurrency, and hands them to the workers.
func (e *engine) claim(limit int) (int, error) {
	now := e.cfg.Now()
	var exclude []StageKey
	type capped struct {
		key  StageKey
		free int
	}
	var caps []capped
	e.mu.Lock()
	for _, name := range e.names {
		p := e.pipelines[name]
		for _, s := range p.Stages {
			k := StageKey{Pipeline: name, Stage: s.Name}
			if s.Breaker != nil {
				st := s.Breaker.State()
				if prev := e.breakers[k]; prev != st {
					e.breakers[k] = st
					e.mu.Unlock()
					e.c.emit(BreakerChanged{Pipeline: name, Stage: s.Name, From: prev, To: st, At: now})
					e.log.Info("redrive: breaker changed", "pipeline", name, "stage", s.Name, "from", prev.String(), "to", st.String())
					e.mu.Lock()
				}
				switch st {
				case retry.BreakerOpen:
					exclude = append(exclude, k)
					continue
				case retry.BreakerHalfOpen:
					// One probe at a time: the breaker decides when to close.
					exclude = append(exclude, k)
					if e.running[k] == 0 {
						caps = append(caps, capped{k, 1})
					}
					continue
				}
			}
			if s.Concurrency > 0 {
				exclude = append(exclude, k)
				if f := s.Concurrency - e.running[k]; f > 0 {
					caps = append(caps, capped{k, f})
				}
			}
		}
	}
	e.mu.Unlock()

	total := 0
	for _, cp := range caps {
		if limit-total <= 0 {
			break
		}
		n, err := e.claimBatch(ClaimRequest{Pipelines: e.names, Only: []StageKey{cp.key}, Limit: min(cp.free, limit-total)}, now)
		total += n
		if err != nil {
			return total, err
		}
	}
	if limit-total > 0 {
		n, err := e.claimBatch(ClaimRequest{Pipelines: e.names, Exclude: exclude, Limit: limit - total}, now)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (e *engine) claimBatch(req ClaimRequest, now time.Time) (int, error) {
	req.Owner = e.cfg.Owner
	req.Now = now
	req.LeaseUntil = now.Add(e.cfg.LeaseDuration)
	leases, err := e.store.Claim(e.claimCtx, req)
	if err != nil {
		if e.claimCtx.Err() != nil {
			return 0, nil
		}
		return 0, err
	}
	ts := make([]*task, len(leases))
	e.mu.Lock()
	for i, l := range leases {
		t := &task{lease: l, stage: -1}
		if p := e.pipelines[l.Item.Pipeline]; p != nil {
			t.pipeline = p
			t.stage = p.stageIndex(l.Item.Stage)
		}
		e.inflight[l.Item.ID] = t
		e.running[t.key()]++
		ts[i] = t
	}
	e.mu.Unlock()
	for _, t := range ts {
		e.work <- t
	}
	return len(leases), nil
}

func (e *engine) inflightCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.inflight)
}

func (e *engine) workLoop() {
	defer e.workers.Done()
	for t := range e.work {
		if e.claimCtx.Err() != nil {
			// Stopping: items not started go back at once.
			t.release = true
		} else {
			e.attempt(t)
		}
		e.completions <- t
	}
}

// errLost is the error recorded for an attempt whose worker vanished.
var errLost = errors.New("lease expired: the worker running the attempt vanished")

// attempt runs the handler of t's stage and decides what follows.
func (e *engine) attempt(t *task) {
	it := &t.lease.Item
	if t.stage < 0 {
		err := retry.Final(fmt.Errorf("stage %q is not in pipeline %q", it.Stage, it.Pipeline))
		now := e.cfg.Now()
		e.decide(t, retry.Policy{}, nil, err, retry.Outcome{Class: retry.ClassFinal}, now, now)
		return
	}
	st := &t.pipeline.Stages[t.stage]
	if st.Breaker != nil {
		if err := st.Breaker.Allow(); err != nil {
			// The dependency is down: give the item back unattempted.
			t.release = true
			return
		}
		t.probe = st.Breaker.State() == retry.BreakerHalfOpen
	}
	// The engine is the outer retry layer: a retry.Do inside the handler
	// makes one attempt per durable attempt instead of multiplying them.
	ctx, cancel := context.WithCancel(e.layerCtx)
	if st.Timeout > 0 {
		ctx, cancel = context.WithTimeout(e.layerCtx, st.Timeout)
	}
	e.mu.Lock()
	t.cancel = cancel
	lost := t.lost
	e.mu.Unlock()
	if lost {
		// Taken over while it waited for a worker.
		cancel()
		t.release = true
		return
	}
	start := e.cfg.Now()
	out, err := call(ctx, st.Handle, it)
	end := e.cfg.Now()
	cancel()
	e.mu.Lock()
	t.cancel, lost = nil, t.lost
	e.mu.Unlock()
	if lost {
		// Another worker took the item over: this result cannot be
		// recorded (the token is stale), so nothing is written.
		t.release = true
		return
	}
	if err != nil && e.workCtx.Err() != nil {
		// The client is stopping and interrupted the handler: the
		// attempt did not fail on its own, so it is not counted.
		t.release = true
		return
	}
	if st.Breaker != nil {
		st.Breaker.Record(err)
	}
	var o retry.Outcome
	if err != nil {
		o = classify(st.Policy, err)
	}
	e.decide(t, st.Policy, out, err, o, start, end)
}

// call runs h, turning a panic into a final error: a panic is a bug that
// another attempt will not fix.
func call(ctx context.Context, h Handler, it *Item) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = retry.Final(fmt.Errorf("handler panicked: %v", r))
		}
	}()
	return h(ctx, it)
}

func classify(p retry.Policy, err error) retry.Outcome {
	if p.Classifier != nil {
		if o, ok := p.Classifier(err); ok {
			return o
		}
		return retry.Outcome{Class: retry.ClassRetryable}
	}
	return retry.Classify(err)
}

// decide turns an attempt's result into the item's next state.
func (e *engine) decide(t *task, p retry.Policy, out []byte, err error, o retry.Outcome, start, end time.Time) {
	it := &t.lease.Item
	number := it.Attempt + 1
	rec := Attempt{
		ItemID: it.ID, RunID: it.RunID, Pipeline: it.Pipeline, Stage: it.Stage, StageIndex: it.StageIndex,
		Number: number, StartedAt: start, FinishedAt: end,
	}
	c := Completion{ItemID: it.ID, Token: t.lease.Token, Now: end, Stage: it.Stage, StageIndex: it.StageIndex,
		Attempt: it.Attempt, RateLimitWaits: it.RateLimitWaits}
	finished := AttemptFinished{Pipeline: it.Pipeline, Stage: it.Stage, RunID: it.RunID, ItemID: it.ID,
		Attempt: number, Duration: end.Sub(start)}
	abortReason, aborted := e.abortedRun(it.RunID)

	switch {
	case err == nil:
		rec.Outcome = OutcomeSucceeded
		c.Attempt, c.RateLimitWaits = 0, 0
		if out == nil {
			out = []byte{}
		}
		c.Payload = out
		if t.stage+1 < len(t.pipeline.Stages) && !aborted {
			c.State = StatePending
			c.StageIndex = t.stage + 1
			c.Stage = t.pipeline.Stages[t.stage+1].Name
			c.NextAt = end
		} else if t.stage+1 < len(t.pipeline.Stages) {
			c.State = StateCanceled
			c.StageIndex = t.stage + 1
			c.Stage = t.pipeline.Stages[t.stage+1].Name
			c.Reason = &Reason{Stage: c.Stage, Class: ClassCanceled, Error: abortReason, At: end}
		} else {
			c.State = StateSucceeded
		}
	default:
		msg := errorMessage(err)
		rec.Error, rec.Class = msg, o.Class.String()
		if errors.Is(err, errLost) {
			rec.Class = ClassLost
		}
		waits := p.MaxRateLimitWaits
		if waits == 0 {
			waits = retry.DefaultMaxRateLimitWaits
		}
		switch {
		case o.Class == retry.ClassFinal:
			rec.Outcome = OutcomeDead
			c.Attempt = number
		case o.Class == retry.ClassRateLimited && it.RateLimitWaits < waits:
			rec.Outcome = OutcomeRateLimited
			rec.Number = number // recorded, but the counter does not move
			rec.Delay = p.RateLimitDelay(o.RetryAfter, max(it.Attempt, 1))
			c.RateLimitWaits = it.RateLimitWaits + 1
		case t.probe && o.Class != retry.ClassFinal:
			// The probe of a half-open breaker failed: the dependency is
			// still down, which is no fault of this item, so the attempt
			// is recorded without consuming the item's allowance.
			rec.Outcome = OutcomeRetry
			rec.Delay = p.Delay(max(it.Attempt, 1))
		case number < p.Attempts():
			rec.Outcome = OutcomeRetry
			rec.Delay = p.Delay(number)
			c.Attempt = number
		default:
			rec.Outcome = OutcomeDead
			c.Attempt = number
		}
		if errors.Is(err, errLost) && rec.Outcome != OutcomeDead {
			rec.Outcome = OutcomeLost
		}
		switch {
		case rec.Outcome == OutcomeDead:
			c.State = StateDead
			class := rec.Class
			if errors.Is(err, errLost) {
				rec.Outcome = OutcomeLost
			}
			c.Reason = &Reason{Stage: it.Stage, Class: class, Error: msg, Attempts: c.Attempt, At: end}
			t.events = append(t.events, DeadLettered{Pipeline: it.Pipeline, RunID: it.RunID, ItemID: it.ID, Reason: *c.Reason})
		case aborted:
			c.State = StateCanceled
			c.Reason = &Reason{Stage: it.Stage, Class: ClassCanceled, Error: abortReason, Attempts: c.Attempt, At: end}
		default:
			c.State = StatePending
			c.NextAt = end.Add(rec.Delay)
			finished.Delay = rec.Delay
			t.events = append(t.events, RetryScheduled{Pipeline: it.Pipeline, Stage: it.Stage, RunID: it.RunID, ItemID: it.ID,
				Attempt: number, Delay: rec.Delay, RateLimited: rec.Outcome == OutcomeRateLimited})
		}
	}
	finished.Outcome, finished.Class, finished.Error = rec.Outcome, rec.Class, rec.Error
	c.Record = rec
	t.comp = c
	t.events = append([]Event{finished}, t.events...)
}

// maxErrorLen bounds a stored error message.
const maxErrorLen = 4096

func errorMessage(err error) string {
	msg := err.Error()
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen] + "…"
	}
	return msg
}

func (e *engine) abortedRun(id int64) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.aborted[id]
	return r, ok
}

// completeLoop writes completions in batches: whatever accumulated while
// the previous batch was being written goes in the next one.
func (e *engine) completeLoop() {
	defer e.completer.Done()
	batch := make([]*task, 0, e.cfg.ClaimBatch)
	for t := range e.completions {
		batch = append(batch[:0], t)
	drain:
		for len(batch) < cap(batch) {
			select {
			case t, ok := <-e.completions:
				if !ok {
					break drain
				}
				batch = append(batch, t)
			default:
				break drain
			}
		}
		e.flush(batch)
	}
}

func (e *engine) flush(batch []*task) {
	var comps []Completion
	var rel []LeaseRef
	for _, t := range batch {
		if t.release {
			rel = append(rel, t.lease.Ref())
		} else {
			comps = append(comps, t.comp)
		}
	}
	ctx := e.flushCtx
	var applied []bool
	if len(comps) > 0 {
		err := retry.Do(ctx, storeRetry, func(ctx context.Context) error {
			var err error
			applied, err = e.store.Complete(ctx, comps)
			return err
		})
		if err != nil {
			// The leases will expire and the rescuer will repeat the
			// attempts: a crash costs a repeated attempt, never an item.
			e.log.Error("redrive: recording completions failed", "err", err, "items", len(comps))
			applied = make([]bool, len(comps))
		}
	}
	if len(rel) > 0 {
		err := retry.Do(ctx, storeRetry, func(ctx context.Context) error {
			return e.store.Release(ctx, rel, e.cfg.Now())
		})
		if err != nil {
			e.log.Error("redrive: releasing leases failed", "err", err, "items", len(rel))
		}
	}
	advanced := false
	i := 0
	e.mu.Lock()
	for _, t := range batch {
		delete(e.inflight, t.lease.Item.ID)
		k := t.key()
		if e.running[k]--; e.running[k] <= 0 {
			delete(e.running, k)
		}
	}
	e.mu.Unlock()
	for _, t := range batch {
		if t.release {
			continue
		}
		ok := applied[i]
		i++
		if !ok {
			e.log.Warn("redrive: completion not applied: the lease was lost", "item", t.lease.Item.ID, "stage", t.lease.Item.Stage)
			continue
		}
		if t.comp.State == StatePending && !t.comp.NextAt.After(t.comp.Now) {
			advanced = true
		}
		for _, ev := range t.events {
			e.c.emit(ev)
		}
	}
	if advanced || len(rel) > 0 {
		e.wake()
	}
	e.wake()
}

func (e *engine) heartbeatLoop() {
	defer e.bg.Done()
	tick := time.NewTicker(e.cfg.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-e.bgCtx.Done():
			return
		case <-tick.C:
		}
		e.mu.Lock()
		refs := make([]LeaseRef, 0, len(e.inflight))
		for _, t := range e.inflight {
			refs = append(refs, t.lease.Ref())
		}
		e.mu.Unlock()
		if len(refs) == 0 {
			continue
		}
		lost, err := e.store.Heartbeat(e.bgCtx, refs, e.cfg.Now().Add(e.cfg.LeaseDuration))
		if err != nil {
			e.log.Warn("redrive: heartbeat failed", "err", err)
			continue
		}
		if len(lost) == 0 {
			continue
		}
		// A stale worker stops working on items that are no longer its
		// own: their new owner runs them. A lease reported lost may also
		// just have been completed meanwhile, and its item claimed again
		// by this client under a new token: only the token that was sent
		// can be lost.
		sent := make(map[int64]int64, len(refs))
		for _, r := range refs {
			sent[r.ItemID] = r.Token
		}
		n := 0
		e.mu.Lock()
		for _, id := range lost {
			if t := e.inflight[id]; t != nil && t.lease.Token == sent[id] {
				n++
				t.lost = true
				if t.cancel != nil {
					t.cancel()
				}
			}
		}
		e.mu.Unlock()
		if n > 0 {
			e.log.Warn("redrive: leases lost; their attempts were interrupted", "items", n)
		}
	}
}

// rescueBatch bounds one rescue.
const rescueBatch = 256

func (e *engine) rescueLoop() {
	defer e.bg.Done()
	for {
		for e.rescue() == rescueBatch {
		}
		if !sleep(e.bgCtx, e.cfg.RescueInterval) {
			return
		}
	}
}

// rescue takes over items whose lease expired, records a lost attempt and
// schedules a retry or dead-letters them.
func (e *engine) rescue() int {
	now := e.cfg.Now()
	leases, err := e.store.ClaimExpired(e.bgCtx, ClaimRequest{Owner: e.cfg.Owner, Pipelines: e.names, Limit: rescueBatch,
		Now: now, LeaseUntil: now.Add(e.cfg.LeaseDuration)})
	if err != nil {
		if e.bgCtx.Err() == nil {
			e.log.Warn("redrive: rescue failed", "err", err)
		}
		return 0
	}
	if len(leases) == 0 {
		return 0
	}
	batch := make([]*task, 0, len(leases))
	e.mu.Lock()
	for _, l := range leases {
		t := &task{lease: l, stage: -1}
		p := e.pipelines[l.Item.Pipeline]
		var pol retry.Policy
		if p != nil {
			t.pipeline = p
			t.stage = p.stageIndex(l.Item.Stage)
			if t.stage >= 0 {
				pol = p.Stages[t.stage].Policy
			}
		}
		started := l.Item.LeaseExpiresAt.Add(-e.cfg.LeaseDuration)
		if started.After(now) || started.IsZero() {
			started = now
		}
		e.inflight[l.Item.ID] = t
		e.running[t.key()]++
		e.mu.Unlock()
		e.decide(t, pol, nil, errLost, retry.Outcome{Class: retry.ClassRetryable}, started, now)
		t.events = append(t.events, Rescued{Pipeline: l.Item.Pipeline, Stage: l.Item.Stage, RunID: l.Item.RunID, ItemID: l.Item.ID})
		e.mu.Lock()
		batch = append(batch, t)
	}
	e.mu.Unlock()
	e.log.Info("redrive: rescued items whose lease expired", "items", len(batch))
	e.flush(batch)
	return len(leases)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
