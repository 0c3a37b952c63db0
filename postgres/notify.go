package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive/retry"
)

// Notifications returns a channel that receives a value when items may have
// become due: when any process enqueues, redrives or releases items in the
// store's schema. It holds one dedicated connection LISTENing on
// Channel(); when that connection drops it reconnects with jittered
// exponential backoff (100 ms doubling to 5 s), sends a wake-up every
// Options.PollFallback meanwhile, and sends one after reconnecting, because
// notifications sent while it was away are lost. Values coalesce: the
// channel has a buffer of one. It is closed when ctx ends.
func (s *Store) Notifications(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	go s.listen(ctx, ch)
	return ch
}

func wake(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// reconnectPolicy spaces the listener's reconnection attempts: 100 ms
// doubling to 5 s, with equal jitter so that many workers that lost the
// server together do not reconnect together.
var reconnectPolicy = retry.Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second, JitterMode: retry.JitterEqual}

func (s *Store) listen(ctx context.Context, ch chan<- struct{}) {
	defer close(ch)
	failures := 0
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, ch, func() { failures = 0 })
		if ctx.Err() != nil {
			return
		}
		_ = err // The engine polls; a listener error only costs latency.
		// Wait with jitter, waking the workers every PollFallback.
		failures++
		deadline := time.NewTimer(reconnectPolicy.Delay(failures))
		tick := time.NewTicker(s.opts.PollFallback)
	wait:
		for {
			select {
			case <-ctx.Done():
				deadline.Stop()
				tick.Stop()
				return
			case <-tick.C:
				wake(ch)
			case <-deadline.C:
				break wait
			}
		}
		tick.Stop()
	}
}

// listenOnce connects, LISTENs and forwards notifications until the
// connection fails or ctx ends. Once LISTEN is in effect it wakes the
// workers, since whatever was notified before (at start, or while
// reconnecting) was not heard. connected is called then.
func (s *Store) listenOnce(ctx context.Context, ch chan<- struct{}, connected func()) error {
	cfg := s.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		return err
	}
	connected()
	wake(ch)
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake(ch)
	}
}
