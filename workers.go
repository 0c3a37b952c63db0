package redrive

import (
	"context"
	"os"
	"slices"
	"time"
)

// Worker is a started Client as recorded in the store's workers table, so
// that operators (and a redrive) can tell whether anything is working a
// pipeline's items.
type Worker struct {
	// Owner is the client's Config.Owner, also written on its leases.
	Owner string `json:"owner"`
	// Host and PID locate the process.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Pipelines are the pipelines the client works, sorted.
	Pipelines []string `json:"pipelines"`
	// StartedAt is when the client started.
	StartedAt time.Time `json:"started_at"`
	// LastSeen is the client's last heartbeat.
	LastSeen time.Time `json:"last_seen"`
	// ExpiresAt is when the row goes stale unless the client heartbeats
	// again: LastSeen plus three heartbeat intervals, and at least 5 s.
	ExpiresAt time.Time `json:"expires_at"`
}

// Live reports whether the worker heartbeat recently enough, at now, to be
// taken as running.
func (w Worker) Live(now time.Time) bool { return now.Before(w.ExpiresAt) }

// Serves reports whether the worker works pipeline p.
func (w Worker) Serves(p string) bool { return slices.Contains(w.Pipelines, p) }

// LiveWorkers returns the live workers of s that serve pipeline p (all
// live workers when p is empty).
func LiveWorkers(ctx context.Context, s Store, p string, now time.Time) ([]Worker, error) {
	ws, err := s.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	var out []Worker
	for _, w := range ws {
		if w.Live(now) && (p == "" || w.Serves(p)) {
			out = append(out, w)
		}
	}
	return out, nil
}

// workerStaleAfter is how many heartbeat intervals a worker row stays live
// without a heartbeat, and workerMinLive the least time it stays live: a
// process that is busy or descheduled for a moment is not taken for gone.
const (
	workerStaleAfter = 3
	workerMinLive    = 5 * time.Second
)

// startWorkerHeartbeat records the engine in the workers table now and
// every heartbeat interval until the engine stops, then removes the row.
// A client without pipelines works nothing and is not recorded.
func (e *engine) startWorkerHeartbeat() {
	if len(e.names) == 0 {
		return
	}
	host, _ := os.Hostname()
	names := slices.Clone(e.names)
	slices.Sort(names)
	w := Worker{Owner: e.cfg.Owner, Host: host, PID: os.Getpid(), Pipelines: names, StartedAt: e.cfg.Now()}
	beat := func() {
		w.LastSeen = e.cfg.Now()
		w.ExpiresAt = w.LastSeen.Add(max(workerStaleAfter*e.cfg.HeartbeatInterval, workerMinLive))
		if err := e.store.UpsertWorker(e.bgCtx, w); err != nil && e.bgCtx.Err() == nil {
			e.log.Warn("redrive: recording the worker failed", "err", err)
		}
	}
	beat()
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		tick := time.NewTicker(e.cfg.HeartbeatInterval)
		defer tick.Stop()
		for {
			select {
			case <-e.bgCtx.Done():
				// The engine stops: the row goes with it, so that nobody
				// takes this process for a live worker.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(e.bgCtx), 5*time.Second)
				if err := e.store.RemoveWorker(ctx, w.Owner); err != nil {
					e.log.Warn("redrive: removing the worker row failed", "err", err)
				}
				cancel()
				return
			case <-tick.C:
				beat()
			}
		}
	}()
}
