package redrive

import (
	"time"

	"github.com/redrive/redrive/retry"
)

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
			f := e.flows[k]
			if f != nil && f.breaker != nil {
				st := f.breaker.State()
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
			if f != nil && f.lim != nil {
				if !f.gate.ClosedUntil(now).IsZero() {
					// The dependency asked everybody to wait: its items stay
					// in the queue, unclaimed, until the gate opens.
					exclude = append(exclude, k)
					continue
				}
				if c := f.claimCap(); c > 0 {
					exclude = append(exclude, k)
					free := c - e.running[k]
					if s.Concurrency > 0 {
						free = min(free, s.Concurrency-e.running[k])
					}
					if free > 0 {
						caps = append(caps, capped{k, free})
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
	ts := make([]*task, len(leases))
	lost := 0
	e.mu.Lock()
	for i, l := range leases {
		t := &task{lease: l, stage: -1}
		if p := e.pipelines[l.Item.Pipeline]; p != nil {
			t.pipeline = p
			t.stage = p.stageIndex(l.Item.Stage)
			t.flow = e.flows[t.key()]
		}
		lost += e.trackLocked(t)
		ts[i] = t
	}
	e.mu.Unlock()
	e.reportLost(lost, "claim")
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
