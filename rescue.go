package redrive

import "github.com/redrive/redrive/retry"

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

// rescue takes over items whose lease expired. A lease whose attempt was
// recorded as started gets a lost attempt, from its recorded start, and a
// retry or the dead-letter queue; the others go back to pending without an
// attempt (startmark.go).
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
	lost, unstarted := 0, 0
	e.mu.Lock()
	for i := range leases {
		l := &leases[i]
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
		lost += e.trackLocked(t)
		started := l.Item.AttemptStartedAt
		ev := Rescued{Pipeline: l.Item.Pipeline, Stage: l.Item.Stage, RunID: l.Item.RunID, ItemID: l.Item.ID, Started: !started.IsZero()}
		if started.IsZero() {
			t.release, t.unstarted = true, true
			unstarted++
		} else {
			if started.After(now) {
				started = now // a clock ahead of this one
			}
			e.mu.Unlock()
			e.decide(t, pol, nil, errLost, retry.Outcome{Class: retry.ClassRetryable}, started, now)
			e.mu.Lock()
		}
		t.events = append(t.events, ev)
		batch = append(batch, t)
	}
	e.mu.Unlock()
	e.reportLost(lost, "rescue")
	e.log.Info("redrive: rescued items whose lease expired", "items", len(batch), "not_started", unstarted)
	e.flush(batch, nil)
	return len(leases)
}
