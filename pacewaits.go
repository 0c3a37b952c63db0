package redrive

import (
	"context"
	"sync"
	"time"
)

// A stage's flow control makes calls wait for their turn before their
// attempts start (flow.go): that time is not the attempt's, so it shows
// nowhere in the history of attempts. The engine sums it per run and stage
// and adds the sums to the store every paceFlushEvery, so that `redrive
// runs show` and the API can say how long a run's calls waited on their
// pace, whichever processes made them.

// PaceWait is how long the calls of one stage of a run waited on the
// stage's flow control (its pace, slow start and gate) before their
// attempts started.
type PaceWait struct {
	// RunID is the run of the items whose calls waited.
	RunID int64 `json:"run_id"`
	// Stage is the stage whose flow the calls waited on.
	Stage string `json:"stage"`
	// Calls is how many calls the flow let start; Waited over Calls is the
	// mean wait before a call.
	Calls int64 `json:"calls"`
	// Waited is the time those calls waited, summed over the calls.
	Waited time.Duration `json:"waited"`
}

// PaceRecorder is implemented by stores that keep the pace waits of runs.
// Both the SQLite and the PostgreSQL store implement it; with a store that
// does not, the waits show only in the process's metrics
// (redrive_flow_waited_seconds_total).
type PaceRecorder interface {
	// AddPaceWaits adds each wait's Calls and Waited to its run and stage.
	AddPaceWaits(ctx context.Context, ws []PaceWait) error
	// PaceWaits returns the sums of run runID, stage by stage, in stage
	// name order.
	PaceWaits(ctx context.Context, runID int64) ([]PaceWait, error)
}

// paceFlushEvery is how often the engine adds the waits it summed to the
// store.
const paceFlushEvery = time.Second

type paceKey struct {
	run   int64
	stage string
}

// paceSums are the waits summed since the last flush.
type paceSums struct {
	mu   sync.Mutex
	sums map[paceKey]PaceWait
}

// note adds one call's wait of d on stage of run.
func (p *paceSums) note(run int64, stage string, d time.Duration) {
	if run == 0 {
		return // items outside runs have nowhere to show it
	}
	k := paceKey{run, stage}
	p.mu.Lock()
	if p.sums == nil {
		p.sums = map[paceKey]PaceWait{}
	}
	w := p.sums[k]
	w.RunID, w.Stage = run, stage
	w.Calls++
	w.Waited += max(d, 0)
	p.sums[k] = w
	p.mu.Unlock()
}

// take returns the sums and starts new ones.
func (p *paceSums) take() []PaceWait {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sums) == 0 {
		return nil
	}
	out := make([]PaceWait, 0, len(p.sums))
	for _, w := range p.sums {
		out = append(out, w)
	}
	clear(p.sums)
	return out
}

// notePace counts a call of stage of run that waited d on its flow, when
// the store keeps pace waits.
func (e *engine) notePace(run int64, stage string, d time.Duration) {
	if _, ok := e.store.(PaceRecorder); ok {
		e.paceSums.note(run, stage, d)
	}
}

// paceStopFlush bounds the flush when the engine stops. A run shorter
// than paceFlushEvery has all its waits in that flush, made while the
// engine's other loops write their last too (on SQLite, through one
// writer), so it gets the time a stop gives the release of leases.
const paceStopFlush = 10 * time.Second

// paceLoop adds the summed waits to the store every paceFlushEvery, and
// once more when the engine stops.
func (e *engine) paceLoop() {
	defer e.bg.Done()
	pr, ok := e.store.(PaceRecorder)
	if !ok {
		return
	}
	tick := time.NewTicker(paceFlushEvery)
	defer tick.Stop()
	for {
		select {
		case <-e.bgCtx.Done():
			ctx, cancel := context.WithTimeout(context.WithoutCancel(e.bgCtx), paceStopFlush)
			e.flushPace(ctx, pr)
			cancel()
			return
		case <-tick.C:
			e.flushPace(e.bgCtx, pr)
		}
	}
}

func (e *engine) flushPace(ctx context.Context, pr PaceRecorder) {
	ws := e.paceSums.take()
	if len(ws) == 0 {
		return
	}
	if err := pr.AddPaceWaits(ctx, ws); err != nil {
		// The sums are for reading, not for deciding: losing one second's
		// of them costs nothing but their figure.
		e.log.Warn("redrive: recording pace waits failed", "err", err)
	}
}
