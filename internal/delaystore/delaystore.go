// Package delaystore wraps a redrive.Store so that chosen calls answer late,
// as they do over a slow network or from a busy database: the call is made
// (and, for a write, committed) at once, and its answer reaches the caller
// only after the configured delay. Tests use it to widen the windows in which
// the engine's loops race each other, and to make heartbeats fail for a while
// so that leases expire in a live process.
package delaystore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive"
)

// ErrHeartbeatDown is what Heartbeat returns while heartbeats are failing.
var ErrHeartbeatDown = errors.New("delaystore: heartbeat failing")

// Delays are how late each kind of call answers. Zero means at once.
type Delays struct {
	// Claim delays the answer of Claim and ClaimExpired, after the leases
	// were taken. Default 0.
	Claim time.Duration
	// Heartbeat delays the answer of Heartbeat, after the leases were
	// extended. Default 0.
	Heartbeat time.Duration
	// Complete delays the answer of Complete, after it committed.
	// Default 0.
	Complete time.Duration
}

// Store is a redrive.Store whose answers arrive late. It forwards
// notifications when the wrapped store is a redrive.Notifier.
type Store struct {
	redrive.Store
	d             Delays
	heartbeatDown atomic.Bool
}

// New wraps s with the delays d.
func New(s redrive.Store, d Delays) *Store {
	return &Store{Store: s, d: d}
}

// FailHeartbeats makes Heartbeat fail with ErrHeartbeatDown, without
// extending any lease, while down is true.
func (s *Store) FailHeartbeats(down bool) { s.heartbeatDown.Store(down) }

// answer waits d, or until ctx ends, before an answer is returned. The
// call has already taken effect either way.
func answer(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Claim claims, then answers after Delays.Claim.
func (s *Store) Claim(ctx context.Context, req redrive.ClaimRequest) ([]redrive.Lease, error) {
	ls, err := s.Store.Claim(ctx, req)
	answer(ctx, s.d.Claim)
	return ls, err
}

// ClaimExpired takes leases over, then answers after Delays.Claim.
func (s *Store) ClaimExpired(ctx context.Context, req redrive.ClaimRequest) ([]redrive.Lease, error) {
	ls, err := s.Store.ClaimExpired(ctx, req)
	answer(ctx, s.d.Claim)
	return ls, err
}

// Heartbeat extends the leases, then answers after Delays.Heartbeat. While
// heartbeats are failing it extends nothing and returns ErrHeartbeatDown.
func (s *Store) Heartbeat(ctx context.Context, leases []redrive.LeaseRef, until time.Time) ([]int64, error) {
	if s.heartbeatDown.Load() {
		answer(ctx, s.d.Heartbeat)
		return nil, ErrHeartbeatDown
	}
	lost, err := s.Store.Heartbeat(ctx, leases, until)
	answer(ctx, s.d.Heartbeat)
	return lost, err
}

// Complete commits the completions, then answers after Delays.Complete.
func (s *Store) Complete(ctx context.Context, cs []redrive.Completion) ([]bool, error) {
	applied, err := s.Store.Complete(ctx, cs)
	answer(ctx, s.d.Complete)
	return applied, err
}

// Notifications forwards the wrapped store's notifications; a store that
// sends none gives a channel that only closes when ctx ends.
func (s *Store) Notifications(ctx context.Context) <-chan struct{} {
	if n, ok := s.Store.(redrive.Notifier); ok {
		return n.Notifications(ctx)
	}
	ch := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ch) })
	return ch
}
