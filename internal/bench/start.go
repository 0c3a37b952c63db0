package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive"
)

// ShapeStart is the benchmark of enqueue-to-start latency alone.
const ShapeStart = "start"

// StartResult is what `redrive bench --shape start` measured, in
// milliseconds: single items enqueued one at a time into an idle engine.
type StartResult struct {
	Store  string `json:"store"`
	Probes int    `json:"probes"`
	// Enqueue is how long the store's Enqueue call took (its transaction
	// up to the commit).
	EnqueueP50 float64 `json:"enqueue_p50_ms"`
	EnqueueP99 float64 `json:"enqueue_p99_ms"`
	// Start is from just before Enqueue was called until the handler
	// started: what a user who enqueues sees.
	StartP50 float64 `json:"start_p50_ms"`
	StartP99 float64 `json:"start_p99_ms"`
	// Committed is from Enqueue's return (the commit, and so the
	// notification) until the handler started: the engine's part.
	CommittedP50 float64 `json:"committed_p50_ms"`
	CommittedP99 float64 `json:"committed_p99_ms"`
	// Notified is from Enqueue's return until the engine heard the
	// notification (PostgreSQL only).
	Notified    int     `json:"notified"` // probes whose notification was heard
	NotifiedP50 float64 `json:"notified_p50_ms,omitempty"`
	NotifiedP99 float64 `json:"notified_p99_ms,omitempty"`
	// Claim is how long the store's Claim took for the claims that
	// leased a probe.
	ClaimP50 float64 `json:"claim_p50_ms"`
	ClaimP99 float64 `json:"claim_p99_ms"`
}

// heardStore is a timedStore that also records when the last
// notification arrived.
type heardStore struct {
	*timedStore
	last     atomic.Int64  // UnixNano of the last notification
	notifies atomic.Bool   // the store is a redrive.Notifier
	heard    chan struct{} // signalled after each notification; buffered, 1
}

// heardAfter waits until a notification has arrived after t, at most
// wait, and reports whether one did. A store without notifications has
// none to wait for.
func (s *heardStore) heardAfter(t time.Time, wait time.Duration) bool {
	if !s.notifies.Load() {
		return false
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for time.Unix(0, s.last.Load()).Before(t) {
		select {
		case <-s.heard:
		case <-timeout.C:
			return false
		}
	}
	return true
}

// Notifications passes the store's notifications on, recording when each
// arrived.
func (s *heardStore) Notifications(ctx context.Context) <-chan struct{} {
	n, ok := s.Store.(redrive.Notifier)
	if !ok {
		return s.timedStore.Notifications(ctx)
	}
	s.notifies.Store(true)
	in := n.Notifications(ctx)
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for range in {
			s.last.Store(time.Now().UnixNano())
			for _, c := range []chan struct{}{out, s.heard} {
				select {
				case c <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out
}

// Start starts a client with a one-stage no-op pipeline and no
// other work, then enqueues probes single items through the store, each
// after the previous one finished and a pause of 50 – 110 ms, so that each
// meets an idle engine at a varying phase of its poll. The engine learns
// of each item as it would of another process's: by LISTEN/NOTIFY on
// PostgreSQL, by its poll (Config.PollInterval, 100 ms) on SQLite.
func Start(ctx context.Context, store redrive.Store, probes int) (StartResult, error) {
	res := StartResult{Probes: probes}
	type probe struct {
		before, after, started time.Time
	}
	var (
		mu      sync.Mutex
		byID    = map[int64]*probe{}
		started = make(chan int64, 1)
		done    = make(chan int64, 1)
	)
	handle := func(_ context.Context, it *redrive.Item) ([]byte, error) {
		now := time.Now()
		mu.Lock()
		if p := byID[it.ID]; p != nil {
			p.started = now
		}
		mu.Unlock()
		started <- it.ID
		return it.Payload, nil
	}
	observe := func(ev redrive.Event) {
		if a, ok := ev.(redrive.AttemptFinished); ok {
			done <- a.ItemID
		}
	}
	hs := &heardStore{timedStore: &timedStore{Store: store}, heard: make(chan struct{}, 1)}
	client := redrive.NewClient(hs, redrive.Config{Workers: 4, Observers: []func(redrive.Event){observe}})
	p := redrive.Pipeline{Name: "bench_start", Stages: []redrive.Stage{{Name: "a", Handle: handle}}}
	if err := client.Register(p); err != nil {
		return res, err
	}
	run, _, err := store.CreateRun(ctx, p.Name, redrive.RunOptions{}, time.Now())
	if err != nil {
		return res, err
	}
	if err := client.Start(ctx); err != nil {
		return res, err
	}
	defer func() { _ = client.Stop(context.Background()) }()
	// Let the engine's first claims and its listener settle.
	time.Sleep(500 * time.Millisecond)
	var enq, start, committed, notified []time.Duration
	for i := range probes {
		time.Sleep(time.Duration(50+i%7*10) * time.Millisecond)
		pr := &probe{before: time.Now()}
		out, err := store.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: p.Name, Stage: "a",
			Items: []redrive.NewItem{{Payload: []byte(`{}`)}}, Now: pr.before})
		pr.after = time.Now()
		if err != nil {
			return res, err
		}
		id := out[0].ID
		mu.Lock()
		byID[id] = pr
		mu.Unlock()
		timeout := time.After(10 * time.Second)
		for got := int64(0); got != id; {
			select {
			case got = <-started:
			case <-timeout:
				return res, fmt.Errorf("bench: probe %d did not start within 10s", i)
			}
		}
		for got := int64(0); got != id; {
			select {
			case got = <-done:
			case <-timeout:
				return res, fmt.Errorf("bench: probe %d did not finish within 10s", i)
			}
		}
		// The engine may have claimed the probe before its notification
		// arrived (a claim already under way, or its poll, on a busy
		// machine): the notification is still waited for, so that its
		// time is the notification's own.
		wasHeard := hs.heardAfter(pr.before, 5*time.Second)
		mu.Lock()
		// A handler that started before Enqueue returned (the engine was
		// woken by the notification before the reply arrived) has no
		// time from the commit: count it as 0.
		enq = append(enq, pr.after.Sub(pr.before))
		start = append(start, pr.started.Sub(pr.before))
		committed = append(committed, max(0, pr.started.Sub(pr.after)))
		if wasHeard {
			notified = append(notified, max(0, time.Unix(0, hs.last.Load()).Sub(pr.after)))
		}
		mu.Unlock()
	}
	res.EnqueueP50, _, res.EnqueueP99 = percentiles(enq)
	res.StartP50, _, res.StartP99 = percentiles(start)
	res.CommittedP50, _, res.CommittedP99 = percentiles(committed)
	res.Notified = len(notified)
	res.NotifiedP50, _, res.NotifiedP99 = percentiles(notified)
	hs.mu.Lock()
	res.ClaimP50, _, res.ClaimP99 = percentiles(hs.ds)
	hs.mu.Unlock()
	return res, nil
}

// PrintStart writes r as `redrive bench --shape start` prints it.
func PrintStart(w io.Writer, r StartResult) {
	fmt.Fprintf(w, "store                %s\n", r.Store)
	fmt.Fprintf(w, "probes               %d single items into an idle engine\n", r.Probes)
	fmt.Fprintf(w, "enqueue call         p50 %.2f ms  p99 %.2f ms\n", r.EnqueueP50, r.EnqueueP99)
	fmt.Fprintf(w, "enqueue-to-start     p50 %.2f ms  p99 %.2f ms\n", r.StartP50, r.StartP99)
	fmt.Fprintf(w, "commit-to-start      p50 %.2f ms  p99 %.2f ms\n", r.CommittedP50, r.CommittedP99)
	if r.NotifiedP50 > 0 {
		fmt.Fprintf(w, "commit-to-notified   p50 %.2f ms  p99 %.2f ms\n", r.NotifiedP50, r.NotifiedP99)
	}
	fmt.Fprintf(w, "claim call           p50 %.2f ms  p99 %.2f ms\n", r.ClaimP50, r.ClaimP99)
}
