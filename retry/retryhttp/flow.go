package retryhttp

import (
	"context"
	"sync"
	"time"

	"github.com/redrive/redrive/retry"
)

// Flow-control constants of Transport.
const (
	// flowFirstPause and flowMaxPause bound the pause after a 429 without Retry-After,
	// which doubles with each one in a row.
	flowFirstPause = 100 * time.Millisecond
	flowMaxPause   = 10 * time.Second
	// flowOutageAfter failures in a row (5xx without Retry-After, transport errors) pause
	// the host: it gets one probe at a time, after a pause that doubles from
	// flowProbeFirst up to flowProbeMax while probes fail.
	flowOutageAfter = 3
	flowProbeFirst  = 250 * time.Millisecond
	flowProbeMax    = time.Second
)

// signal is what one exchange told the flow.
type signal int

const (
	sigSuccess   signal = iota // a response below 500 other than a rate limit
	sigPushback                // a rate limit: 429, or a status with a Retry-After
	sigFailure                 // an outage: 5xx without Retry-After, a transport error
	sigCancelled               // the caller gave up: says nothing about the host
)

// flow paces the calls of one Transport to one host: an adaptive rate (retry.Limiter:
// slow start, then AIMD on push backs), a gate (retry.Gate) closed until a Retry-After
// ends or for a growing pause after a 429 without one, and an outage pause that lets one
// probe through at a time. It is safe for concurrent use.
type flow struct {
	lim  *retry.Limiter
	gate retry.Gate

	mu         sync.Mutex
	limitedRun int // 429s without Retry-After in a row
	failures   int // outage failures in a row
	probing    bool
	probeOut   bool // a probe is in flight
	probePause time.Duration
	changed    chan struct{} // closed and replaced when probing ends or a probe returns
}

func newFlow() *flow {
	return &flow{lim: retry.NewLimiter(retry.LimiterOptions{}), changed: make(chan struct{})}
}

// notify wakes the callers waiting for a probe; f.mu is held.
func (f *flow) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// acquire waits until a call may be sent and returns its permit and whether it is an
// outage probe.
func (f *flow) acquire(ctx context.Context) (retry.Permit, bool, error) {
	for {
		f.mu.Lock()
		if f.probing && f.probeOut {
			ch := f.changed
			f.mu.Unlock()
			select {
			case <-ctx.Done():
				return retry.Permit{}, false, ctx.Err()
			case <-ch:
			}
			continue
		}
		f.mu.Unlock()
		if err := f.gate.Wait(ctx); err != nil {
			return retry.Permit{}, false, err
		}
		p, err := f.lim.Wait(ctx)
		if err != nil {
			return retry.Permit{}, false, err
		}
		f.mu.Lock()
		switch {
		case !f.gate.ClosedUntil(time.Now()).IsZero(), f.probing && f.probeOut:
			// the gate closed or a probe left while this call waited for its pace
			f.mu.Unlock()
			p.Done()
			continue
		case f.probing:
			f.probeOut = true
			f.mu.Unlock()
			return p, true, nil
		}
		f.mu.Unlock()
		return p, false, nil
	}
}

// record tells the flow how the call of p ended; retryAfter is the host's Retry-After,
// if any.
func (f *flow) record(p retry.Permit, probe bool, s signal, retryAfter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if probe {
		f.probeOut = false
	}
	switch s {
	case sigCancelled:
		p.Done()
		if probe {
			f.notify()
		}
	case sigSuccess:
		p.Success()
		f.limitedRun, f.failures = 0, 0
		if f.probing {
			f.probing, f.probePause = false, 0
			f.notify()
		}
	case sigPushback:
		cut := p.PushBack()
		f.failures = 0
		pause := retryAfter
		if pause <= 0 {
			if cut {
				// One more round refused: the calls of one round answered
				// together (15 429s to one burst) double the pause once, not
				// 15 times, which stalled the host for 10 s.
				f.limitedRun++
			}
			pause = min(flowFirstPause<<min(max(f.limitedRun-1, 0), 16), flowMaxPause)
		}
		until := time.Now().Add(pause)
		if f.gate.Close(until) {
			f.lim.PauseUntil(until)
		}
		if f.probing {
			f.probing, f.probePause = false, 0
			f.notify()
		}
	case sigFailure:
		p.Done()
		f.failures++
		if f.probing || f.failures >= flowOutageAfter {
			if !f.probing || probe {
				f.probePause = min(max(2*f.probePause, flowProbeFirst), flowProbeMax)
				f.gate.Close(time.Now().Add(f.probePause))
			}
			f.probing = true
			f.notify()
		}
	}
}
