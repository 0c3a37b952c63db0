package retryhttp

import (
	"context"
	"sync"
	"time"
)

// Flow-control constants of Transport.
const (
	// flowStartRate is the calls per second of a transport that has not been pushed back yet
	// nor seen a success; each success adds one call per second until the first pushback
	// (a slow start: the rate doubles about every second).
	flowStartRate = 10.0
	// flowFloor is the lowest rate a pushback leaves.
	flowFloor = 1.0
	// flowDecrease multiplies the rate at a pushback.
	flowDecrease = 0.7
	// flowIncrease is the calls per second added per second of successes after the first
	// pushback (additive increase).
	flowIncrease = 2.0
	// flowFirstPause and flowMaxPause bound the pause after a 429 without Retry-After,
	// which doubles with each one in a row.
	flowFirstPause = 100 * time.Millisecond
	flowMaxPause   = 10 * time.Second
	// flowOutageAfter failures in a row (5xx without Retry-After, transport errors) pause
	// the transport: it sends one probe at a time, after a pause that doubles from
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
	sigCancelled               // the caller gave up: says nothing about the dependency
)

// flow paces the calls of one Transport: an adaptive rate (slow start, then additive
// increase and multiplicative decrease on pushback), a gate before which nothing is sent
// (a Retry-After, a growing pause after a 429 without one), and an outage pause that lets
// one probe through at a time. It is safe for concurrent use.
type flow struct {
	mu         sync.Mutex
	rate       float64   // calls per second
	slowStart  bool      // no pushback yet
	next       time.Time // earliest time of the next call under rate
	gate       time.Time // no call before it
	lastCut    time.Time // when the rate was last decreased
	limitedRun int       // 429s without Retry-After in a row
	failures   int       // outage failures in a row
	probing    bool      // paused by an outage: one probe at a time
	probeOut   bool      // a probe is in flight
	probePause time.Duration
	changed    chan struct{} // closed and replaced when the gate or probe state changes
}

func newFlow() *flow {
	return &flow{rate: flowStartRate, slowStart: true, changed: make(chan struct{})}
}

// notify wakes the waiters, which reserve their slots again from the gate; f.mu is held.
func (f *flow) notify() {
	f.next = f.gate
	close(f.changed)
	f.changed = make(chan struct{})
}

// acquire waits until a call may be sent and returns the time it was let through and
// whether it is an outage probe.
func (f *flow) acquire(ctx context.Context) (time.Time, bool, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		f.mu.Lock()
		now := time.Now()
		changed := f.changed
		at := now
		if f.gate.After(at) {
			at = f.gate
		}
		wait, reserved := false, false
		switch {
		case f.probing && f.probeOut:
			wait = true // the probe's answer decides
		case at.After(now):
			// the gate is closed: come back when it opens, and take a slot then
		case f.probing:
			f.probeOut = true
			f.mu.Unlock()
			return now, true, nil
		default:
			slot := now
			if f.next.After(slot) {
				slot = f.next
			}
			f.next = slot.Add(time.Duration(float64(time.Second) / f.rate))
			if !slot.After(now) {
				f.mu.Unlock()
				return now, false, nil
			}
			at, reserved = slot, true // go at slot unless the gate closes before it
		}
		f.mu.Unlock()
		var fire <-chan time.Time
		if !wait {
			if timer == nil {
				timer = time.NewTimer(at.Sub(now))
			} else {
				timer.Reset(at.Sub(now))
			}
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return time.Time{}, false, ctx.Err()
		case <-changed:
		case <-fire:
			if reserved {
				f.mu.Lock()
				ok := !f.gate.After(time.Now()) && !f.probing
				f.mu.Unlock()
				if ok {
					return time.Now(), false, nil
				}
			}
		}
	}
}

// record tells the flow how an exchange let through at sent (by acquire) ended;
// retryAfter is the dependency's Retry-After, if any.
func (f *flow) record(sent time.Time, probe bool, s signal, retryAfter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if probe {
		f.probeOut = false
	}
	switch s {
	case sigCancelled:
		if probe {
			f.notify()
		}
	case sigSuccess:
		f.limitedRun, f.failures = 0, 0
		if f.slowStart {
			f.rate++
		} else {
			f.rate += flowIncrease / f.rate
		}
		if f.probing {
			f.probing, f.probePause = false, 0
			f.notify()
		}
	case sigPushback:
		f.failures = 0
		if !sent.Before(f.lastCut) { // sent under the current rate: cut it once
			f.slowStart = false
			f.rate = max(flowFloor, f.rate*flowDecrease)
			f.lastCut = now
			pause := retryAfter
			if pause <= 0 {
				pause = min(flowFirstPause<<min(f.limitedRun, 16), flowMaxPause)
				f.limitedRun++
			}
			if g := now.Add(pause); g.After(f.gate) {
				f.gate = g
			}
		} else if retryAfter > 0 {
			if g := now.Add(retryAfter); g.After(f.gate) {
				f.gate = g // never call sooner than the dependency asked
			}
		}
		if f.probing {
			f.probing, f.probePause = false, 0
		}
		f.notify()
	case sigFailure:
		f.failures++
		if f.probing || f.failures >= flowOutageAfter {
			f.probing = true
			if probe || f.probePause == 0 {
				f.probePause = min(max(2*f.probePause, flowProbeFirst), flowProbeMax)
				if g := now.Add(f.probePause); g.After(f.gate) {
					f.gate = g
				}
			}
			f.notify()
		}
	}
}
