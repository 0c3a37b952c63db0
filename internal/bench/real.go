package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/sqlite"
)

// ShapeReal is the real-shape benchmark; ShapeRealWorker is one of its
// extra worker processes (started by the benchmark itself).
const (
	ShapeReal       = "real"
	ShapeRealWorker = "real-worker"
)

// RealOptions are the settings of `redrive bench --shape real`.
type RealOptions struct {
	Items, Stages, Workers, Batch, Procs int
	Waiting                              int
	Payload                              int
	FailPercent                          int
	Probes                               int
	URL, Schema                          string
}

// RealResult is what `redrive bench --shape real` measured.
type RealResult struct {
	Store        string  `json:"store"`
	Items        int     `json:"items"`
	Stages       int     `json:"stages"`
	Procs        int     `json:"processes"`
	Workers      int     `json:"workers_per_process"`
	PayloadBytes int     `json:"payload_bytes"`
	FailPercent  int     `json:"failing_attempts_percent"`
	Waiting      int     `json:"waiting_backlog"`
	WorkSeconds  float64 `json:"work_seconds"`
	// StageCompletionsPS counts successful stage attempts per second,
	// AttemptsPS every recorded attempt (failures included).
	StageCompletionsPS float64 `json:"stage_completions_per_second"`
	AttemptsPS         float64 `json:"attempts_per_second"`
	ItemsPS            float64 `json:"items_per_second"`
	Retries            int     `json:"retries"`
	Succeeded          int     `json:"succeeded"`
	Dead               int     `json:"dead"`
	// Claim latency of the benchmark's own process, in milliseconds.
	ClaimP50 float64 `json:"claim_p50_ms"`
	ClaimP95 float64 `json:"claim_p95_ms"`
	ClaimP99 float64 `json:"claim_p99_ms"`
	Claims   int     `json:"claims"`
	// Enqueue-to-start latency of single items enqueued one at a time
	// into an idle engine, in milliseconds.
	StartP50 float64 `json:"enqueue_to_start_p50_ms"`
	StartP99 float64 `json:"enqueue_to_start_p99_ms"`
	// BytesPerMillion is the database size per million items it holds
	// (the waiting backlog included), attempts and indexes included.
	BytesPerMillion float64 `json:"bytes_per_million_items"`
}

// realFails reports whether an attempt fails: failPercent of attempts, by
// a hash of the item, stage and attempt, so that every process agrees and
// runs are reproducible.
func realFails(it *redrive.Item, failPercent int) bool {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d/%d", it.ID, it.StageIndex, it.Attempt)
	return int(h.Sum32()%100) < failPercent
}

// realPipeline is the benchmark's pipeline: stages that pass their 1 KB
// payload on, failPercent of attempts failing with a retryable error
// retried after 20-80 ms, up to 5 attempts. started, when not nil, is told
// each first attempt of a first stage.
func realPipeline(stages, failPercent int, started func(*redrive.Item)) redrive.Pipeline {
	p := redrive.Pipeline{Name: "bench_real"}
	policy := retry.Policy{MaxAttempts: 5, BaseDelay: 40 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Jitter: 0.5}
	for i := range stages {
		p.Stages = append(p.Stages, redrive.Stage{Name: "stage" + strconv.Itoa(i+1), Policy: policy,
			Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				if started != nil && it.StageIndex == 0 && it.Attempt == 0 {
					started(it)
				}
				if realFails(it, failPercent) {
					return nil, errors.New("503 service unavailable")
				}
				return it.Payload, nil
			}})
	}
	return p
}

// timedStore measures Claim.
type timedStore struct {
	redrive.Store
	mu sync.Mutex
	ds []time.Duration
}

// Claim is the store's Claim, timed when it leased items.
func (s *timedStore) Claim(ctx context.Context, req redrive.ClaimRequest) ([]redrive.Lease, error) {
	start := time.Now()
	ls, err := s.Store.Claim(ctx, req)
	d := time.Since(start)
	if len(ls) > 0 {
		s.mu.Lock()
		s.ds = append(s.ds, d)
		s.mu.Unlock()
	}
	return ls, err
}

// Notifications passes the store's notifications on, so that the wrapper
// keeps LISTEN/NOTIFY wake-ups.
func (s *timedStore) Notifications(ctx context.Context) <-chan struct{} {
	if n, ok := s.Store.(redrive.Notifier); ok {
		return n.Notifications(ctx)
	}
	ch := make(chan struct{})
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}

func percentiles(ds []time.Duration) (p50, p95, p99 float64) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	ms := func(q int) float64 { return float64(ds[min(len(ds)-1, len(ds)*q/100)]) / float64(time.Millisecond) }
	return ms(50), ms(95), ms(99)
}

// Real works o.Items items of o.Payload bytes through o.Stages
// stages with o.FailPercent % of attempts failing and retried, beside a
// backlog of o.Waiting items waiting on a one-hour backoff, in o.Procs
// processes (this one and o.Procs-1 started from the same executable), and
// then measures enqueue-to-start latency of single items with the engine
// idle, and the database's size.
func Real(ctx context.Context, store redrive.Store, o RealOptions) (RealResult, error) {
	res := RealResult{Items: o.Items, Stages: o.Stages, Procs: o.Procs, Workers: o.Workers,
		PayloadBytes: o.Payload, FailPercent: o.FailPercent, Waiting: o.Waiting}
	ts := &timedStore{Store: store}
	var probeMu sync.Mutex
	probes := map[int64]time.Duration{}
	probeRun := atomic.Int64{}
	started := func(it *redrive.Item) {
		if it.RunID == probeRun.Load() {
			d := time.Since(it.EnqueuedAt)
			probeMu.Lock()
			probes[it.ID] = d
			probeMu.Unlock()
		}
	}
	p := realPipeline(o.Stages, o.FailPercent, started)
	cfg := redrive.Config{Workers: o.Workers, ClaimBatch: o.Batch, PollInterval: 100 * time.Millisecond}
	client := redrive.NewClient(ts, cfg)
	if err := client.Register(p); err != nil {
		return res, err
	}
	if o.Waiting > 0 {
		if err := realBacklog(ctx, store, p, o.Waiting); err != nil {
			return res, fmt.Errorf("bench: backlog: %w", err)
		}
	}
	payload := make([]byte, o.Payload)
	copy(payload, `{"text":"`)
	for i := 9; i < len(payload)-2; i++ {
		payload[i] = 'a' + byte(i%26)
	}
	copy(payload[len(payload)-2:], `"}`)
	in := make([]redrive.NewItem, o.Items)
	for i := range in {
		in[i] = redrive.NewItem{Payload: payload}
	}
	run, err := client.StartRun(ctx, p.Name, in, redrive.RunOptions{})
	if err != nil {
		return res, err
	}

	// The other processes, started now and stopped once the run is done.
	var children []*exec.Cmd
	stopChildren := func() {
		for _, c := range children {
			_ = c.Process.Signal(os.Interrupt)
		}
		for _, c := range children {
			_ = c.Wait()
		}
		children = nil
	}
	defer stopChildren()
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	for range o.Procs - 1 {
		c := exec.CommandContext(ctx, self, "--db", o.URL, "--pg-schema", o.Schema, "bench", "--shape", ShapeRealWorker,
			"--stages", strconv.Itoa(o.Stages), "--workers", strconv.Itoa(o.Workers), "--batch", strconv.Itoa(o.Batch),
			"--fail-percent", strconv.Itoa(o.FailPercent))
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		if err := c.Start(); err != nil {
			return res, fmt.Errorf("bench: start a worker process: %w", err)
		}
		children = append(children, c)
	}
	if err := client.Start(ctx); err != nil {
		return res, err
	}
	defer func() { _ = client.Stop(context.Background()) }()
	r, err := client.WaitRun(ctx, run.ID)
	if err != nil {
		return res, err
	}
	res.WorkSeconds = time.Since(t0).Seconds()
	res.Succeeded, res.Dead = r.Counts.Succeeded, r.Counts.Dead
	res.ClaimP50, res.ClaimP95, res.ClaimP99 = percentiles(ts.ds)
	res.Claims = len(ts.ds)

	hist, err := store.RetryHistogram(ctx, run.ID)
	if err != nil {
		return res, err
	}
	for _, b := range hist {
		res.Retries += b.Retries * b.Items
	}
	// A dead item's earlier stages are not counted: with 5 attempts at
	// 5 % failures an item dies once in three million.
	res.StageCompletionsPS = float64(res.Succeeded*o.Stages) / res.WorkSeconds
	res.AttemptsPS = float64(o.Items*o.Stages+res.Retries) / res.WorkSeconds
	res.ItemsPS = float64(o.Items) / res.WorkSeconds

	// Enqueue-to-start with this process's engine idle and alone: single
	// items, one at a time, enqueued through the store, so that the engine
	// learns of them as it would of another process's items (LISTEN/NOTIFY
	// on PostgreSQL, polling every 100 ms on SQLite).
	stopChildren()
	if o.Probes > 0 {
		prun, _, err := store.CreateRun(ctx, p.Name, redrive.RunOptions{}, time.Now())
		if err != nil {
			return res, err
		}
		probeRun.Store(prun.ID)
		for i := range o.Probes {
			// Let the engine go idle: the last probe went through every
			// stage, and the engine's claim loop is waiting, at a varying
			// phase of its poll, when the next probe comes.
			time.Sleep(time.Duration(50+i%7*10) * time.Millisecond)
			enq, err := store.Enqueue(ctx, redrive.EnqueueRequest{RunID: prun.ID, Pipeline: p.Name, Stage: p.Stages[0].Name,
				Items: []redrive.NewItem{{Payload: payload}}, Now: time.Now()})
			if err != nil {
				return res, err
			}
			// Wait for this probe to start before the next one, so that
			// every probe meets an idle engine.
			deadline := time.Now().Add(10 * time.Second)
			for {
				probeMu.Lock()
				n := len(probes)
				probeMu.Unlock()
				if n > i {
					break
				}
				if time.Now().After(deadline) {
					return res, fmt.Errorf("bench: probe %d did not start within 10s", i)
				}
				time.Sleep(time.Millisecond)
			}
			for {
				it, err := store.GetItem(ctx, enq[0].ID)
				if err != nil {
					return res, err
				}
				if it.State == redrive.StateSucceeded || it.State == redrive.StateDead {
					break
				}
				if time.Now().After(deadline) {
					return res, fmt.Errorf("bench: probe %d did not finish within 10s", i)
				}
				time.Sleep(time.Millisecond)
			}
		}
		ds := make([]time.Duration, 0, len(probes))
		for _, d := range probes {
			ds = append(ds, d)
		}
		res.StartP50, _, res.StartP99 = percentiles(ds)
	}
	size, err := dbSize(ctx, store, o.Schema)
	if err != nil {
		return res, err
	}
	total := o.Items + o.Waiting + o.Probes
	res.BytesPerMillion = float64(size) / float64(total) * 1e6
	return res, nil
}

// realBacklog enqueues n items into a run of p and fails each once with a
// retry due in an hour, so that they wait through the whole benchmark.
func realBacklog(ctx context.Context, store redrive.Store, p redrive.Pipeline, n int) error {
	run, _, err := store.CreateRun(ctx, p.Name, redrive.RunOptions{}, time.Now())
	if err != nil {
		return err
	}
	batch := make([]redrive.NewItem, min(n, 5000))
	for i := range batch {
		batch[i] = redrive.NewItem{Payload: []byte(`{"waiting":true}`)}
	}
	for left := n; left > 0; left -= len(batch) {
		if _, err := store.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: p.Name, Stage: p.Stages[0].Name,
			Items: batch[:min(left, len(batch))], Now: time.Now()}); err != nil {
			return err
		}
	}
	for left := n; left > 0; {
		now := time.Now()
		ls, err := store.Claim(ctx, redrive.ClaimRequest{Owner: "bench", Pipelines: []string{p.Name}, Limit: min(left, 2000),
			LeaseUntil: now.Add(time.Minute), Now: now})
		if err != nil {
			return err
		}
		if len(ls) == 0 {
			return fmt.Errorf("%d backlog items not claimable", left)
		}
		cs := make([]redrive.Completion, len(ls))
		for i, l := range ls {
			cs[i] = redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StatePending,
				Stage: l.Item.Stage, Attempt: 1, NextAt: now.Add(time.Hour), Now: now,
				Record: redrive.Attempt{ItemID: l.Item.ID, RunID: l.Item.RunID, Pipeline: l.Item.Pipeline, Stage: l.Item.Stage, Number: 1, Outcome: redrive.OutcomeRetry,
					Class: "retryable", Error: "503 service unavailable", StartedAt: now, FinishedAt: now, Delay: time.Hour}}
		}
		if _, err := store.Complete(ctx, cs); err != nil {
			return err
		}
		left -= len(ls)
	}
	return nil
}

// dbSize is the size of the benchmark's database: the schema's tables with
// their indexes and TOAST on PostgreSQL, the file on SQLite.
func dbSize(ctx context.Context, store redrive.Store, schema string) (int64, error) {
	switch s := store.(type) {
	case *postgres.Store:
		var n int64
		err := s.Pool().QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relkind = 'r'`, schema).Scan(&n)
		if err != nil {
			return 0, fmt.Errorf("bench: database size: %w", err)
		}
		return n, nil
	case *sqlite.Store:
		// The database's pages, as SQLite counts them: the file alone
		// holds only what was checkpointed (nothing, after a first round
		// smaller than the write-ahead log's checkpoint threshold), and
		// the file plus its log counts a page once per version logged.
		db, err := sql.Open("sqlite", s.Path()+"?_pragma=busy_timeout(5000)")
		if err != nil {
			return 0, fmt.Errorf("bench: database size: %w", err)
		}
		defer db.Close()
		var pages, size int64
		if err := db.QueryRowContext(ctx, `SELECT page_count, page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&pages, &size); err != nil {
			return 0, fmt.Errorf("bench: database size: %w", err)
		}
		return pages * size, nil
	}
	return 0, nil
}

// RealWorker is one extra worker process of the real-shape benchmark:
// it works the benchmark's pipeline until interrupted.
func RealWorker(ctx context.Context, store redrive.Store, stages, workers, batch, failPercent int) error {
	client := redrive.NewClient(store, redrive.Config{Workers: workers, ClaimBatch: batch, PollInterval: 100 * time.Millisecond})
	if err := client.Register(realPipeline(stages, failPercent, nil)); err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return client.Stop(context.Background())
}

// PrintReal writes r as `redrive bench --shape real` prints it.
func PrintReal(w io.Writer, r RealResult) {
	fmt.Fprintf(w, "store                %s\n", r.Store)
	fmt.Fprintf(w, "shape                %d items × %d stages, %d B payloads, %d%% of attempts failing, %d items waiting on a backoff\n",
		r.Items, r.Stages, r.PayloadBytes, r.FailPercent, r.Waiting)
	fmt.Fprintf(w, "processes            %d × %d workers\n", r.Procs, r.Workers)
	fmt.Fprintf(w, "work                 %.2fs  %.0f items/s  %.0f stage completions/s  %.0f attempts/s (%d retries)\n",
		r.WorkSeconds, r.ItemsPS, r.StageCompletionsPS, r.AttemptsPS, r.Retries)
	fmt.Fprintf(w, "outcome              %d succeeded, %d dead\n", r.Succeeded, r.Dead)
	fmt.Fprintf(w, "claim latency        p50 %.2f ms  p95 %.2f ms  p99 %.2f ms (%d claims of this process)\n", r.ClaimP50, r.ClaimP95, r.ClaimP99, r.Claims)
	fmt.Fprintf(w, "enqueue to start     p50 %.2f ms  p99 %.2f ms (idle engine)\n", r.StartP50, r.StartP99)
	fmt.Fprintf(w, "database size        %.0f MB per million items\n", r.BytesPerMillion/1e6)
}
