package redrive

import (
	"math"
	"time"

	"github.com/redrive/redrive/retry"
)

// storeRetry is the policy for store calls that failed (a lost database
// connection, a busy SQLite file): quick at first, capped at 5 s.
var storeRetry = retry.Policy{MaxAttempts: 1 << 30, BaseDelay: 50 * time.Millisecond, MaxDelay: 5 * time.Second}

// A process leases only work that can start: an item for each free worker,
// and a prefetch of what its workers start in Config.PrefetchWindow at
// their recent rate, so that a worker that finishes finds its next item
// without waiting for a claim. Leasing more helps nobody: the extra items
// wait in this process while other processes idle and newly due retries
// queue behind them, and a crash would strand them until their lease
// expired. (An earlier rule leased up to Workers + 2 × ClaimBatch: a
// process with 2 workers held 66 items, and a second process started
// 150 ms later found none.)

// startRate estimates how many handlers a process starts per second, as a
// moving average over about a second while the rate holds or falls and
// over about a tenth of one while it rises. A process leases what it
// starts in the prefetch window at this rate, and its starts are bounded
// by what it leased: with one time constant of a second, a burst of work
// after a quiet spell was claimed a few dozen items at a time for its
// first second, each claim a statement of its own (100,000 items on
// PostgreSQL: 870 items per claim on average, 1,560 with the rise
// followed within a tenth of a second; docs/BENCHMARKS.md). Following a
// fall as slowly keeps work leased through a pause of a few claims.
//
// At rest (an estimate whose prefetch is less than the free workers) even
// the fast rise starts from nothing: a process that started or woke to a
// burst claimed its free workers' worth a claim at a time (32, the one
// that finished, 31, ...) for its first 50 – 100 ms. So at rest, once
// twice the free workers have started within a sample of the first
// starts seen, the estimate takes their rate at once, measured from those
// first starts rather than from the quiet before them; and while it
// wakes, it takes the rate of every further two workers' worth of starts
// that come faster than it says (the starts are bounded by the claims,
// which the estimate bounds), until they come no faster.
type startRate struct {
	// burst is how many start at once when work comes to a process at
	// rest (its workers); rest is the estimate below which it is at rest.
	burst int64
	rest  float64
	at    time.Time
	count int64
	rate  float64
	// last is the count at the previous update; wakeAt and wakeCount
	// when and at what count starts were first seen at rest (zero when
	// none are being timed); waking is set from the estimate taken at
	// rest until the starts come no faster than the estimate.
	last      int64
	wakeAt    time.Time
	wakeCount int64
	waking    bool
}

// newStartRate is the estimate of a process with workers workers that
// leases what they start in window.
func newStartRate(workers int, window time.Duration) startRate {
	r := startRate{burst: int64(max(workers, minWake)), rest: math.Inf(1)}
	if window > 0 {
		r.rest = float64(workers) / window.Seconds()
	}
	return r
}

// The time constants of startRate, in seconds, and the shortest time over
// which it measures.
const (
	rateRise   = 0.1
	rateFall   = 1.0
	rateSample = 0.05
)

// minWake is the fewest workers that startRate assumes in a burst.
const minWake = 8

// update records that count handlers have started in all by now and
// returns the estimate.
func (r *startRate) update(now time.Time, count int64) float64 {
	if r.at.IsZero() {
		r.at, r.count, r.last = now, count, count
		return r.rate
	}
	seen := count != r.last
	r.last = count
	dt := now.Sub(r.at).Seconds()
	n := count - r.count
	wake := 2 * r.burst
	switch {
	case r.waking:
		if n >= wake && dt >= rateSample/5 {
			if inst := float64(n) / dt; inst > r.rate {
				r.rate, r.at, r.count = inst, now, count
				return r.rate
			}
			r.waking = false
		}
	case r.rate < r.rest:
		if !r.wakeAt.IsZero() && now.Sub(r.wakeAt).Seconds() > rateSample {
			r.wakeAt = time.Time{}
		}
		switch {
		case r.wakeAt.IsZero():
			if seen {
				r.wakeAt, r.wakeCount = now, count
			}
		case count-r.wakeCount >= wake && now.After(r.wakeAt):
			r.rate = max(r.rate, float64(count-r.wakeCount)/now.Sub(r.wakeAt).Seconds())
			r.at, r.count, r.wakeAt, r.waking = now, count, time.Time{}, true
			return r.rate
		}
	default:
		r.wakeAt = time.Time{}
	}
	// Starts come in bursts, a claim's worth at a time: measured over
	// less than this, the rate swings, and the fast rise would follow the
	// swings up and not down.
	if dt < rateSample {
		return r.rate
	}
	r.waking = false
	inst := float64(n) / dt
	tau := rateFall
	if inst > r.rate {
		tau = rateRise
	}
	w := 1 - math.Exp(-dt/tau)
	r.rate += w * (inst - r.rate)
	r.at, r.count = now, count
	return r.rate
}

// prefetch is how many items to lease beyond the free workers.
func (e *engine) prefetch(rate float64) int {
	if e.cfg.PrefetchWindow <= 0 {
		return 0
	}
	n := math.Ceil(rate * e.cfg.PrefetchWindow.Seconds())
	return int(min(n, float64(2*e.cfg.ClaimBatch)))
}

// want is how many items the claimer should lease now, or 0 to wait:
// it claims when a worker would otherwise idle, or when at least half a
// batch is wanted, so that claims go in batches under load.
func (e *engine) want(prefetch int) int {
	free := e.cfg.Workers - int(e.busy.Load())
	unstarted := int(e.unstarted.Load())
	n := min(free+prefetch-unstarted, e.cfg.ClaimBatch)
	if n <= 0 {
		return 0
	}
	if unstarted < free || n >= max(1, min(e.cfg.ClaimBatch, e.cfg.Workers+prefetch)/2) {
		return n
	}
	return 0
}

func (e *engine) claimLoop() {
	defer e.claimers.Done()
	failures := 0
	rate := newStartRate(e.cfg.Workers, e.cfg.PrefetchWindow)
	for {
		if e.claimCtx.Err() != nil {
			return
		}
		n := e.want(e.prefetch(rate.update(e.cfg.Now(), e.starts.Load())))
		got := 0
		if n > 0 {
			var err error
			got, err = e.claim(n)
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
		}
		if got > 0 && got == n {
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
	local := 0
	e.mu.Lock()
	for _, name := range e.names {
		p := e.pipelines[name]
		for _, s := range p.Stages {
			k := StageKey{Pipeline: name, Stage: s.Name}
			f := e.flows[k]
			var st retry.BreakerState
			if f != nil && f.breaker != nil {
				st = f.breaker.State()
				if prev := e.breakers[k]; prev != st {
					e.breakers[k] = st
					e.mu.Unlock()
					e.c.emit(BreakerChanged{Pipeline: name, Stage: s.Name, From: prev, To: st, At: now})
					e.log.Info("redrive: breaker changed", "pipeline", name, "stage", s.Name, "from", prev.String(), "to", st.String())
					e.mu.Lock()
				}
			}
			if s.External {
				// Leased over HTTP by workers elsewhere (external.go).
				exclude = append(exclude, k)
				continue
			}
			local++
			if f != nil && f.breaker != nil {
				switch st {
				case retry.BreakerOpen:
					exclude = append(exclude, k)
					continue
				case retry.BreakerHalfOpen:
					// One probe at a time: the breaker decides when to close.
					exclude = append(exclude, k)
					if e.runningOfLocked(k) == 0 {
						caps = append(caps, capped{k, 1})
					}
					continue
				}
			}
			if f != nil && f.lim != nil {
				if !f.gate.ClosedUntil(now).IsZero() {
					// The dependency asked everybody to wait: its items stay
					// in the queue, unclaimed, until the gate opens.
					exclude = append(exclude, k)
					continue
				}
				if c := f.claimCap(); c > 0 {
					exclude = append(exclude, k)
					free := c - e.runningOfLocked(k)
					if s.Concurrency > 0 {
						free = min(free, s.Concurrency-e.runningOfLocked(k))
					}
					if free > 0 {
						caps = append(caps, capped{k, free})
					}
					continue
				}
			}
			if s.Concurrency > 0 {
				exclude = append(exclude, k)
				if f := s.Concurrency - e.runningOfLocked(k); f > 0 {
					caps = append(caps, capped{k, f})
				}
			}
		}
	}
	e.mu.Unlock()
	if local == 0 {
		return 0, nil
	}

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
	req, ok := e.withoutPaused(req, now) // stages paused by operators: pause.go
	if !ok {
		return 0, nil
	}
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
	// The batch's tasks are made in one allocation, and a run of leases of
	// one stage (a claim's usual batch) looks its stage up once: a task is
	// most of what the engine allocates per item, and the lookups hash two
	// strings each (docs/BENCHMARKS.md).
	ts := make([]task, len(leases))
	var last stageOf
	lost := 0
	e.mu.Lock()
	for i := range leases {
		l := &leases[i]
		if i == 0 || l.Item.Pipeline != last.pipeline || l.Item.Stage != last.stage {
			last = e.stageOfLocked(l.Item.Pipeline, l.Item.Stage)
		}
		t := &ts[i]
		*t = task{lease: l, pipeline: last.p, stage: last.index, flow: last.flow, running: last.running}
		lost += e.trackLocked(t)
	}
	e.mu.Unlock()
	e.reportLost(lost, "claim")
	e.unstarted.Add(int64(len(ts)))
	for i := range ts {
		e.work <- &ts[i]
	}
	return len(leases), nil
}

// stageOf is what the engine knows of a stage that leases name: its
// pipeline and index there (nil and -1 when not registered), its flow and
// its count of leases held.
type stageOf struct {
	pipeline, stage string
	p               *Pipeline
	index           int
	flow            *flow
	running         *int
}

// stageOfLocked looks up the stage of pipeline and stage. e.mu is held.
func (e *engine) stageOfLocked(pipeline, stage string) stageOf {
	k := StageKey{Pipeline: pipeline, Stage: stage}
	s := stageOf{pipeline: pipeline, stage: stage, index: -1, running: e.runningLocked(k)}
	if p := e.pipelines[pipeline]; p != nil {
		s.p, s.index, s.flow = p, p.stageIndex(stage), e.flows[k]
	}
	return s
}
