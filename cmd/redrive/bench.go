package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
	"github.com/redrive/redrive/storeurl"
)

// benchResult is what `redrive bench` measured.
type benchResult struct {
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
	// On PostgreSQL, the limits measured in the same run (see
	// postgres.Store.BareQueue) and the ratios to them.
	CopyPerSecond  float64 `json:"copy_per_second,omitempty"`
	BarePerSecond  float64 `json:"bare_sql_per_second,omitempty"`
	CopyBefore     float64 `json:"copy_before_per_second,omitempty"`
	CopyAfter      float64 `json:"copy_after_per_second,omitempty"`
	BareBefore     float64 `json:"bare_sql_before_per_second,omitempty"`
	BareAfter      float64 `json:"bare_sql_after_per_second,omitempty"`
	InsertOverCopy float64 `json:"insert_over_copy,omitempty"`
	WorkOverBare   float64 `json:"work_over_bare_sql,omitempty"`
	// On PostgreSQL with --insert-rounds, the insert measured against COPY
	// in alternated rounds (see runInsertRounds).
	InsertRounds *insertRounds `json:"insert_rounds,omitempty"`
}

func newBenchCmd() *cobra.Command {
	var (
		items, stages, workers, batch int
		asJSON                        bool
		insertRoundsN                 int
		cpuProfile                    string
		shape                         string
		waiting                       float64
		claimLimit, samples           int
		real                          realOptions
		rounds                        int
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure insert and work throughput of a no-op pipeline",
		Long: `bench enqueues --items items into a pipeline of --stages no-op stages, then
works them with --workers workers, and prints items inserted per second, items
worked per second and stage completions per second.

Without --db it uses a fresh SQLite file in a temporary directory, never the
database of REDRIVE_DATABASE_URL. With a
postgres:// URL it uses a fresh schema (redrive_bench_<time>) that it drops
afterwards, unless --pg-schema is given.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if items < 1 || stages < 1 || workers < 1 || batch < 0 {
				return flagErrorf("items", "--items, --stages and --workers must be at least 1")
			}
			if err := checkShape(shape, items, waiting, claimLimit, samples); err != nil {
				return err
			}
			ctx := cmd.Context()
			c := dbConfigFrom(ctx)
			url, cleanup, err := benchDatabase(cmd)
			if err != nil {
				return err
			}
			defer cleanup()
			t, err := parseDBURL(url)
			if err != nil {
				return err
			}
			schema := c.Schema
			dropSchema := false
			if t.Kind == storeurl.Postgres && !cmd.Flags().Changed("pg-schema") {
				schema = "redrive_bench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
				dropSchema = true
			}
			store, closeStore, err := openStoreWith(ctx, url, openOptions{Schema: schema, Migrate: true})
			if err != nil {
				return err
			}
			defer closeStore()
			if pg, ok := store.(*postgres.Store); ok && dropSchema {
				defer func() {
					_, _ = pg.Pool().Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				}()
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			switch shape {
			case shapeRealWorker:
				return runRealWorker(ctx, store, stages, workers, batch, real.FailPercent)
			case shapeStart:
				r, err := runStartBench(ctx, store, real.Probes)
				if err != nil {
					return err
				}
				r.Store = redactURL(url)
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				printStart(cmd.OutOrStdout(), r)
				return nil
			case shapeReal:
				real.Items, real.Stages, real.Workers, real.Batch = items, stages, workers, batch
				real.Waiting = int(float64(items) * waiting)
				real.URL, real.Schema = url, schema
				r, err := runRealBench(ctx, store, real)
				if err != nil {
					return err
				}
				r.Store = redactURL(url)
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				printReal(cmd.OutOrStdout(), r)
				return nil
			}
			if shape == shapeBacklog {
				waitingN := int(float64(items) * waiting)
				r, err := runBacklogBench(ctx, store, items, waitingN, claimLimit, samples)
				if err != nil {
					return err
				}
				r.Store = redactURL(url)
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), r)
				}
				printBacklog(cmd.OutOrStdout(), r)
				return nil
			}
			if rounds > 1 {
				rs, err := runRounds(ctx, store, url, schema, cmd.ErrOrStderr(), rounds, items, stages, workers, batch)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), rs)
				}
				printRounds(cmd.OutOrStdout(), redactURL(url), rs)
				return nil
			}
			// On PostgreSQL the server's own limits are measured just before
			// and just after the engine, and the engine is compared with their
			// mean: on a shared machine a single baseline a minute away from
			// the engine's figure swung the ratio by half.
			pg, bracket := store.(*postgres.Store)
			bracket = bracket && stages == 1
			var bareBefore postgres.BareResult
			if bracket {
				if bareBefore, err = pg.BareQueue(ctx, items, benchBatch(batch, workers), 4, []byte(`{}`)); err != nil {
					return err
				}
			}
			res, err := runBench(ctx, store, items, stages, workers, batch, 0)
			if err != nil {
				return err
			}
			if bracket {
				bareAfter, err := pg.BareQueue(ctx, items, res.Batch, 4, []byte(`{}`))
				if err != nil {
					return err
				}
				res.CopyBefore, res.CopyAfter = bareBefore.CopyPerSecond, bareAfter.CopyPerSecond
				res.BareBefore, res.BareAfter = bareBefore.WorkPerSecond, bareAfter.WorkPerSecond
				res.CopyPerSecond = (res.CopyBefore + res.CopyAfter) / 2
				res.BarePerSecond = (res.BareBefore + res.BareAfter) / 2
				res.InsertOverCopy = res.InsertPerSecond / res.CopyPerSecond
				res.WorkOverBare = res.ItemsPerSecond / res.BarePerSecond
				if insertRoundsN > 0 {
					ir, err := runInsertRounds(ctx, url, items, insertRoundsN)
					if err != nil {
						return err
					}
					res.InsertRounds = &ir
				}
			}
			res.Store = redactURL(url)
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "store              %s\n", res.Store)
			fmt.Fprintf(w, "items × stages     %d × %d, %d workers, claim batch %d, GOMAXPROCS %d\n", res.Items, res.Stages, res.Workers, res.Batch, res.GOMAXPROCS)
			fmt.Fprintf(w, "insert             %.2fs  %.0f items/s\n", res.InsertSeconds, res.InsertPerSecond)
			fmt.Fprintf(w, "work               %.2fs  %.0f items/s  %.0f stage completions/s\n", res.WorkSeconds, res.ItemsPerSecond, res.StageCompletionsPS)
			if res.BarePerSecond > 0 {
				fmt.Fprintf(w, "COPY               %.0f rows/s, before and after the engine %.0f and %.0f  (insert / COPY = %.2f)\n",
					res.CopyPerSecond, res.CopyBefore, res.CopyAfter, res.InsertOverCopy)
				fmt.Fprintf(w, "bare SQL queue     %.0f items/s, before and after the engine %.0f and %.0f  (work / bare SQL = %.2f)\n",
					res.BarePerSecond, res.BareBefore, res.BareAfter, res.WorkOverBare)
			}
			if ir := res.InsertRounds; ir != nil {
				fmt.Fprintf(w, "insert / COPY      %.2f, the median of %d alternated rounds:", ir.Median, len(ir.Ratios))
				for _, r := range ir.Ratios {
					fmt.Fprintf(w, " %.2f", r)
				}
				fmt.Fprintln(w)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&items, "items", 100000, "items to enqueue")
	cmd.Flags().IntVar(&stages, "stages", 1, "no-op stages in the pipeline")
	cmd.Flags().IntVar(&workers, "workers", 32, "concurrent workers")
	cmd.Flags().IntVar(&batch, "batch", 2000, "claim batch size (0: the engine's default for --workers); large batches suit no-op stages")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	cmd.Flags().StringVar(&shape, "shape", shapeNoop, "what to measure: "+shapeNoop+" (a no-op pipeline), "+shapeBacklog+
		" (claim latency with items waiting on a backoff, against due items only), "+shapeReal+
		" (payloads, stages, failures, a waiting backlog, several processes) or "+shapeStart+
		" (enqueue-to-start of single items into an idle engine)")
	cmd.Flags().Float64Var(&waiting, "waiting", 0.9, "--shape backlog and real: items waiting on a backoff, as a fraction of --items")
	cmd.Flags().IntVar(&claimLimit, "claim-limit", 100, "--shape backlog: items per timed claim")
	cmd.Flags().IntVar(&samples, "samples", 200, "--shape backlog: timed claims per measurement")
	cmd.Flags().IntVar(&insertRoundsN, "insert-rounds", 5, "--shape noop on PostgreSQL: after the run, measure the insert against COPY this many times more, alternated, in a scratch schema, and print the median ratio (0: skip)")
	cmd.Flags().IntVar(&rounds, "rounds", 1, "--shape noop: work --items this many times on the same store, deleting succeeded items as they finish, and compare the last round with the first")
	cmd.Flags().IntVar(&real.Procs, "procs", 1, "--shape real: worker processes, this one included (PostgreSQL)")
	cmd.Flags().IntVar(&real.Payload, "payload", 1024, "--shape real: payload bytes per item")
	cmd.Flags().IntVar(&real.FailPercent, "fail-percent", 5, "--shape real: percentage of attempts that fail and are retried")
	cmd.Flags().IntVar(&real.Probes, "probes", 200, "--shape real and start: single items enqueued into the idle engine to time enqueue-to-start")
	cmd.AddCommand(newBenchOverloadCmd(), newBenchOutageCmd())
	return cmd
}

// runBench enqueues and works a no-op pipeline on store. A positive
// retention deletes succeeded items that long after they succeeded,
// checking every second.
func runBench(ctx context.Context, store redrive.Store, items, stages, workers, batch int, retention time.Duration) (benchResult, error) {
	res := benchResult{Items: items, Stages: stages, Workers: workers, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	total := int64(items * stages)
	var done atomic.Int64
	finished := make(chan time.Time, 1)
	observe := func(ev redrive.Event) {
		if a, ok := ev.(redrive.AttemptFinished); ok && a.Outcome == redrive.OutcomeSucceeded {
			if done.Add(1) == total {
				finished <- time.Now()
			}
		}
	}
	cfg := redrive.Config{Workers: workers, ClaimBatch: batch, Observers: []func(redrive.Event){observe}}
	if retention > 0 {
		cfg.Retention, cfg.RetentionInterval = retention, time.Second
	}
	client := redrive.NewClient(store, cfg)
	noop := func(_ context.Context, it *redrive.Item) ([]byte, error) { return it.Payload, nil }
	p := redrive.Pipeline{Name: "bench"}
	for i := range stages {
		p.Stages = append(p.Stages, redrive.Stage{Name: "stage" + strconv.Itoa(i+1), Handle: noop})
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

	t1 := time.Now()
	if err := client.Start(ctx); err != nil {
		return res, err
	}
	var end time.Time
	select {
	case end = <-finished:
	case <-ctx.Done():
		_ = client.Stop(context.Background())
		return res, ctx.Err()
	}
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
	if r.Counts.Succeeded != items {
		return res, fmt.Errorf("bench: %d of %d items succeeded: %+v", r.Counts.Succeeded, items, r.Counts)
	}
	res.Succeeded = r.Counts.Succeeded
	res.Batch = benchBatch(batch, workers)
	return res, nil
}

// benchBatch is the claim batch a bench of --batch batch and --workers
// workers claims with: batch, or the engine's default for workers when 0.
func benchBatch(batch, workers int) int {
	if batch == 0 {
		return min(max(workers, 32), 512)
	}
	return batch
}
