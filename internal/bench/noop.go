package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
)

// The shapes of `redrive bench`.
const (
	ShapeNoop    = "noop"
	ShapeBacklog = "backlog"
)

// Result is what `redrive bench` measured.
type Result struct {
	Store              string  `json:"store"`
	Items              int     `json:"items"`
	Stages             int     `json:"stages"`
	Workers            int     `json:"workers"`
	Batch              int     `json:"batch"`
	GOMAXPROCS         int     `json:"gomaxprocs"`
	InsertSeconds      float64 `json:"insert_seconds"`
	InsertPerSecond    float64 `json:"inserted_per_second"`
	WorkSeconds        float64 `json:"work_seconds"`
	ItemsPerSecond     float64 `json:"items_per_second"`
	StageCompletionsPS float64 `json:"stage_completions_per_second"`
	Succeeded          int     `json:"succeeded"`
	// Engine is where the engine's time per item went (see Cost); measured
	// with one round only.
	Engine Cost `json:"engine_cost"`
	// Audited is where the audited bare loop's time per item went, the
	// mean of its two runs.
	Audited Cost `json:"audited_cost,omitempty"`
	// With one stage, the audited bare loop (see Audited) measured just
	// before and just after the engine on the same store, with the
	// engine's claim batch, and the engine's work rate over their mean.
	AuditedLoops     int     `json:"audited_loops,omitempty"`
	AuditedBefore    float64 `json:"audited_before_per_second,omitempty"`
	AuditedAfter     float64 `json:"audited_after_per_second,omitempty"`
	AuditedPerSecond float64 `json:"audited_per_second,omitempty"`
	WorkOverAudited  float64 `json:"work_over_audited,omitempty"`
	// On PostgreSQL, the limits measured in the same run by
	// postgres.Store.BareQueue and the ratios to them. Its loop records no
	// attempts and fences nothing, so it is a weaker limit than the
	// audited loop's.
	CopyPerSecond  float64 `json:"copy_per_second,omitempty"`
	BarePerSecond  float64 `json:"bare_sql_per_second,omitempty"`
	CopyBefore     float64 `json:"copy_before_per_second,omitempty"`
	CopyAfter      float64 `json:"copy_after_per_second,omitempty"`
	BareBefore     float64 `json:"bare_sql_before_per_second,omitempty"`
	BareAfter      float64 `json:"bare_sql_after_per_second,omitempty"`
	InsertOverCopy float64 `json:"insert_over_copy,omitempty"`
	WorkOverBare   float64 `json:"work_over_bare_sql,omitempty"`
	// On PostgreSQL with --insert-rounds, the insert measured against COPY
	// in alternated rounds (see InsertRounds).
	InsertRounds *InsertRoundsResult `json:"insert_rounds,omitempty"`
	// With --ratio-rounds, WorkOverAudited of each round, the first this
	// result's own and each later one measured on a new store, and their
	// median.
	WorkOverAuditedRounds []float64 `json:"work_over_audited_rounds,omitempty"`
	WorkOverAuditedMedian float64   `json:"work_over_audited_median,omitempty"`
}

// NoopOptions are the settings of NoopWithLimits.
type NoopOptions struct {
	// Items, Stages and Workers are the items to work, the no-op stages of
	// their pipeline and the engine's workers; each must be at least 1 (no
	// defaults).
	Items, Stages, Workers int
	// Batch is the engine's claim batch; 0 means the engine's default for
	// Workers (see Batch).
	Batch int
	// URL is the database's URL and Schema the PostgreSQL schema of the
	// store, for the scratch tables of the limits and InsertRounds.
	URL, Schema string
	// InsertRounds is how many alternated rounds of InsertRounds to run
	// after the engine on PostgreSQL; 0 runs none.
	InsertRounds int
	// CPUProfile, when not nil, receives a CPU profile of the engine's
	// work alone: from Start until the last stage completion. Default nil,
	// no profile.
	CPUProfile io.Writer
	// Checkpoint, on PostgreSQL, runs CHECKPOINT before each measured
	// phase (the audited loop, the bare SQL queue, the engine), so that
	// none of them pays for a checkpoint that an earlier phase's WAL
	// started. It needs a superuser or the role pg_checkpoint. Default
	// false: the server checkpoints when it will.
	Checkpoint bool
}

// NoopWithLimits works o.Items items through a no-op pipeline (see Noop)
// and, with one stage, brackets the engine with its limits on the same
// store: the audited bare loop (both stores) and postgres.Store.BareQueue
// (PostgreSQL), each just before and just after the engine, compared by
// their mean. On a shared machine a single baseline a minute away from the
// engine's figure swung the ratio by half.
func NoopWithLimits(ctx context.Context, store redrive.Store, o NoopOptions) (Result, error) {
	batch := Batch(o.Batch, o.Workers)
	payload := []byte(`{}`)
	pg, isPG := store.(*postgres.Store)
	limits := o.Stages == 1
	var (
		res                       Result
		err                       error
		auditedBefore, auditedAft float64
		costBefore, costAfter     Cost
		bareBefore, bareAfter     postgres.BareResult
	)
	checkpoint := func() error {
		if !o.Checkpoint || !isPG {
			return nil
		}
		if _, err := pg.Pool().Exec(ctx, "CHECKPOINT"); err != nil {
			return fmt.Errorf("bench: checkpoint (it needs a superuser or the role pg_checkpoint): %w", err)
		}
		return nil
	}
	if limits {
		if err := checkpoint(); err != nil {
			return res, err
		}
		if auditedBefore, costBefore, err = Audited(ctx, store, o.Schema, o.Items, batch, AuditedLoops, payload); err != nil {
			return res, err
		}
		if isPG {
			if err := checkpoint(); err != nil {
				return res, err
			}
			if bareBefore, err = pg.BareQueue(ctx, o.Items, batch, AuditedLoops, payload); err != nil {
				return res, err
			}
		}
	}
	if err := checkpoint(); err != nil {
		return res, err
	}
	if res, err = Noop(ctx, store, o.Schema, o.Items, o.Stages, o.Workers, o.Batch, 0, o.CPUProfile); err != nil {
		return res, err
	}
	if !limits {
		return res, nil
	}
	if isPG {
		if err := checkpoint(); err != nil {
			return res, err
		}
		if bareAfter, err = pg.BareQueue(ctx, o.Items, batch, AuditedLoops, payload); err != nil {
			return res, err
		}
	}
	if err := checkpoint(); err != nil {
		return res, err
	}
	if auditedAft, costAfter, err = Audited(ctx, store, o.Schema, o.Items, batch, AuditedLoops, payload); err != nil {
		return res, err
	}
	res.AuditedLoops = AuditedLoops
	res.AuditedBefore, res.AuditedAfter = auditedBefore, auditedAft
	res.AuditedPerSecond = (auditedBefore + auditedAft) / 2
	res.Audited = Cost{ProcessCPU: (costBefore.ProcessCPU + costAfter.ProcessCPU) / 2,
		ServerCPU: (costBefore.ServerCPU + costAfter.ServerCPU) / 2, ClaimWall: (costBefore.ClaimWall + costAfter.ClaimWall) / 2,
		CompleteWall: (costBefore.CompleteWall + costAfter.CompleteWall) / 2,
		ClaimBatch:   (costBefore.ClaimBatch + costAfter.ClaimBatch) / 2, CompleteBatch: (costBefore.CompleteBatch + costAfter.CompleteBatch) / 2,
		Allocs: (costBefore.Allocs + costAfter.Allocs) / 2, Bytes: (costBefore.Bytes + costAfter.Bytes) / 2}
	res.WorkOverAudited = res.ItemsPerSecond / res.AuditedPerSecond
	if isPG {
		res.CopyBefore, res.CopyAfter = bareBefore.CopyPerSecond, bareAfter.CopyPerSecond
		res.BareBefore, res.BareAfter = bareBefore.WorkPerSecond, bareAfter.WorkPerSecond
		res.CopyPerSecond = (res.CopyBefore + res.CopyAfter) / 2
		res.BarePerSecond = (res.BareBefore + res.BareAfter) / 2
		res.InsertOverCopy = res.InsertPerSecond / res.CopyPerSecond
		res.WorkOverBare = res.ItemsPerSecond / res.BarePerSecond
		if o.InsertRounds > 0 {
			ir, err := InsertRounds(ctx, o.URL, o.Items, o.InsertRounds)
			if err != nil {
				return res, err
			}
			res.InsertRounds = &ir
		}
	}
	return res, nil
}

// PrintNoop writes res as `redrive bench` prints it.
func PrintNoop(w io.Writer, res Result) {
	fmt.Fprintf(w, "store              %s\n", res.Store)
	fmt.Fprintf(w, "items × stages     %d × %d, %d workers, claim batch %d, GOMAXPROCS %d\n", res.Items, res.Stages, res.Workers, res.Batch, res.GOMAXPROCS)
	fmt.Fprintf(w, "insert             %.2fs  %.0f items/s\n", res.InsertSeconds, res.InsertPerSecond)
	fmt.Fprintf(w, "work               %.2fs  %.0f items/s  %.0f stage completions/s\n", res.WorkSeconds, res.ItemsPerSecond, res.StageCompletionsPS)
	if res.AuditedPerSecond > 0 {
		fmt.Fprintf(w, "audited bare loop  %.0f items/s, before and after the engine %.0f and %.0f  (work / audited = %.2f)\n",
			res.AuditedPerSecond, res.AuditedBefore, res.AuditedAfter, res.WorkOverAudited)
	}
	if len(res.WorkOverAuditedRounds) > 1 {
		fmt.Fprintf(w, "work / audited     %.2f, the median of %d rounds, each on a new store:", res.WorkOverAuditedMedian,
			len(res.WorkOverAuditedRounds))
		for _, r := range res.WorkOverAuditedRounds {
			fmt.Fprintf(w, " %.2f", r)
		}
		fmt.Fprintln(w)
	}
	c := func(name string, c Cost) {
		fmt.Fprintf(w, "%-19sµs per item: CPU %.1f here", name, c.ProcessCPU)
		if c.ServerCPU > 0 {
			fmt.Fprintf(w, " + %.1f server", c.ServerCPU)
		}
		fmt.Fprintf(w, "; in claims %.1f, in completions %.1f (wall, summed over callers); batches %.0f claimed, %.0f completed",
			c.ClaimWall, c.CompleteWall, c.ClaimBatch, c.CompleteBatch)
		if c.Allocs > 0 {
			fmt.Fprintf(w, "; allocated here %.1f objects, %.0f bytes", c.Allocs, c.Bytes)
		}
		fmt.Fprintln(w)
	}
	if res.Engine.ProcessCPU > 0 {
		c("engine cost", res.Engine)
	}
	if res.Audited.ProcessCPU > 0 {
		c("audited cost", res.Audited)
	}
	if res.BarePerSecond > 0 {
		fmt.Fprintf(w, "COPY               %.0f rows/s, before and after the engine %.0f and %.0f  (insert / COPY = %.2f)\n",
			res.CopyPerSecond, res.CopyBefore, res.CopyAfter, res.InsertOverCopy)
		fmt.Fprintf(w, "bare SQL queue     %.0f items/s, before and after the engine %.0f and %.0f  (work / bare SQL = %.2f; no attempts, no fencing)\n",
			res.BarePerSecond, res.BareBefore, res.BareAfter, res.WorkOverBare)
	}
	if ir := res.InsertRounds; ir != nil {
		fmt.Fprintf(w, "insert / COPY      %.2f, the median of %d alternated rounds:", ir.Median, len(ir.Ratios))
		for _, r := range ir.Ratios {
			fmt.Fprintf(w, " %.2f", r)
		}
		fmt.Fprintln(w)
	}
}

// Noop enqueues and works a no-op pipeline on store (of PostgreSQL
// schema schema) and measures the CPU time of this process and of the
// backends serving it (see cpuMeter). A positive
// retention deletes succeeded items that long after they succeeded,
// checking every second. A non-nil profile receives a CPU profile of the
// work, from Start until the last stage completion.
func Noop(ctx context.Context, store redrive.Store, schema string, items, stages, workers, batch int, retention time.Duration, profile io.Writer) (Result, error) {
	return work(ctx, store, schema, items, stages, workers, batch, retention, profile, nil)
}

// work is Noop with a handler of its own for every stage: nil for the
// no-op one, whose items all succeed; any other's items must all die, each
// in one attempt.
func work(ctx context.Context, store redrive.Store, schema string, items, stages, workers, batch int, retention time.Duration,
	profile io.Writer, handle redrive.Handler) (Result, error) {
	res := Result{Items: items, Stages: stages, Workers: workers, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	total := int64(items * stages)
	want := redrive.OutcomeSucceeded
	if handle != nil {
		total, want = int64(items), redrive.OutcomeDead
	}
	var done atomic.Int64
	finished := make(chan time.Time, 1)
	observe := func(ev redrive.Event) {
		if a, ok := ev.(redrive.AttemptFinished); ok && a.Outcome == want {
			if done.Add(1) == total {
				finished <- time.Now()
			}
		}
	}
	cfg := redrive.Config{Workers: workers, ClaimBatch: batch, Observers: []func(redrive.Event){observe}}
	if retention > 0 {
		cfg.Retention, cfg.RetentionInterval = retention, time.Second
	}
	// With one round, the calls are timed; retention needs the store's
	// own optional interfaces (redrive.Outbox), which a wrapper hides.
	var timer *callTimer
	engineStore := store
	if retention == 0 {
		timer = &callTimer{Store: store}
		engineStore = timer
	}
	client := redrive.NewClient(engineStore, cfg)
	if handle == nil {
		handle = func(_ context.Context, it *redrive.Item) ([]byte, error) { return it.Payload, nil }
	}
	p := redrive.Pipeline{Name: "bench"}
	for i := range stages {
		p.Stages = append(p.Stages, redrive.Stage{Name: "stage" + strconv.Itoa(i+1), Handle: handle})
	}
	if err := client.Register(p); err != nil {
		return res, err
	}
	in := make([]redrive.NewItem, items)
	for i := range in {
		in[i] = redrive.NewItem{Payload: []byte(`{}`)}
	}
	t0 := time.Now()
	run, err := client.StartRun(ctx, "bench", in, redrive.RunOptions{})
	if err != nil {
		return res, err
	}
	res.InsertSeconds = time.Since(t0).Seconds()
	res.InsertPerSecond = float64(items) / res.InsertSeconds

	if profile != nil {
		if err := pprof.StartCPUProfile(profile); err != nil {
			return res, err
		}
	}
	meter := startCPU(ctx, store, schema)
	t1 := time.Now()
	if err := client.Start(ctx); err != nil {
		if profile != nil {
			pprof.StopCPUProfile()
		}
		return res, err
	}
	var end time.Time
	select {
	case end = <-finished:
	case <-ctx.Done():
	}
	if profile != nil {
		pprof.StopCPUProfile()
	}
	if end.IsZero() {
		_ = client.Stop(context.Background())
		return res, ctx.Err()
	}
	// Without a timer (rounds with retention), the CPU per item still
	// shows what a later round costs more than the first; on PostgreSQL
	// it counts the backends of retention and the store's own VACUUM too.
	if timer != nil {
		res.Engine = timer.cost(items)
	}
	// Read before the meter's own queries allocate.
	meter.allocs(&res.Engine, items)
	self, server := meter.stop(ctx)
	res.Engine.ProcessCPU, res.Engine.ServerCPU = perItem(self, items), perItem(server, items)
	res.WorkSeconds = end.Sub(t1).Seconds()
	res.ItemsPerSecond = float64(items) / res.WorkSeconds
	res.StageCompletionsPS = float64(total) / res.WorkSeconds
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var r redrive.Run
	if retention > 0 {
		// Every stage completion was counted above. Retention may delete
		// the run's last items before the engine sees that none is left,
		// and a run with no items is taken for one still being filled and
		// never finished: read the counts instead of waiting for a status.
		r, err = store.GetRun(wctx, run.ID)
	} else {
		r, err = client.WaitRun(wctx, run.ID)
	}
	if stopErr := client.Stop(context.Background()); err == nil {
		err = stopErr
	}
	if err != nil {
		return res, err
	}
	if retention > 0 {
		// Retention deleted succeeded items as they finished.
		if left := r.Counts.Total - r.Counts.Succeeded; left != 0 {
			return res, fmt.Errorf("bench: %d items of the run did not succeed: %+v", left, r.Counts)
		}
		r.Counts.Succeeded += items - r.Counts.Total
	}
	if want == redrive.OutcomeDead {
		if r.Counts.Dead != items {
			return res, fmt.Errorf("bench: %d of %d items died: %+v", r.Counts.Dead, items, r.Counts)
		}
	} else if r.Counts.Succeeded != items {
		return res, fmt.Errorf("bench: %d of %d items succeeded: %+v", r.Counts.Succeeded, items, r.Counts)
	}
	res.Succeeded = r.Counts.Succeeded
	res.Batch = Batch(batch, workers)
	return res, nil
}

// Batch is the claim batch a bench of --batch batch and --workers
// workers claims with: batch, or the engine's default for workers when 0.
func Batch(batch, workers int) int {
	if batch == 0 {
		return min(max(workers, 32), 512)
	}
	return batch
}
