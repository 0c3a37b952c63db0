package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/bench"
	"github.com/redrive/redrive/postgres"
	"github.com/redrive/redrive/storeurl"
)

func newBenchCmd() *cobra.Command {
	var (
		items, stages, workers, batch int
		asJSON                        bool
		insertRoundsN                 int
		cpuProfile                    string
		shape                         string
		waiting                       float64
		claimLimit, samples           int
		real                          bench.RealOptions
		rounds                        int
		vacuumAfter                   int
		ratioRounds                   int
		checkpoint                    bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure insert and work throughput of a no-op pipeline",
		Long: `bench enqueues --items items into a pipeline of --stages no-op stages, then
works them with --workers workers, and prints items inserted per second, items
worked per second and stage completions per second.

With one stage it measures, on the same store just before and just after the
engine, the audited bare loop: 4 loops that each claim a batch of --batch jobs
with one UPDATE ... FOR UPDATE SKIP LOCKED statement (SQLite: in a write
transaction) and then, in one transaction, mark them done and insert one
attempt row each. It prints the engine's rate as a fraction of that loop's, and
where an item's time went for both: CPU of this process and of the PostgreSQL
backends that serve it (on the same host, found by their client ports), time
in claims and completions, batch sizes, and this process's heap allocations
per item (objects and bytes). On PostgreSQL it also
prints COPY and the older bare SQL queue (no attempts, no fencing).
--ratio-rounds N measures the ratio N times, each later time on a new store,
and prints the median; --checkpoint (PostgreSQL) runs CHECKPOINT before each
phase. On a shared machine one ratio swings by a tenth or more.

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
			if ratioRounds < 1 {
				return flagErrorf("ratio-rounds", "--ratio-rounds must be at least 1, not %d", ratioRounds)
			}
			if ratioRounds > 1 && (shape != bench.ShapeNoop || stages != 1 || rounds > 1) {
				return flagErrorf("ratio-rounds", "--ratio-rounds needs --shape noop with one stage and one round")
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
			if checkpoint && t.Kind != storeurl.Postgres {
				return flagErrorf("checkpoint", "--checkpoint needs a PostgreSQL database (--db postgres://...)")
			}
			schema := c.Schema
			dropSchema := false
			if t.Kind == storeurl.Postgres && !cmd.Flags().Changed("pg-schema") {
				schema = "redrive_bench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
				dropSchema = true
			}
			store, closeStore, err := openStoreWith(ctx, url, openOptions{Schema: schema, Migrate: true, VacuumAfter: vacuumAfter})
			if err != nil {
				return err
			}
			defer closeStore()
			if pg, ok := store.(*postgres.Store); ok && dropSchema {
				defer func() {
					_, _ = pg.Pool().Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				}()
			}
			// The no-op shape of one round profiles the engine's work
			// alone, not its limits measured around it; the others the
			// whole run.
			var profile io.Writer
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if shape == bench.ShapeNoop && rounds <= 1 {
					profile = f
				} else {
					if err := pprof.StartCPUProfile(f); err != nil {
						return err
					}
					defer pprof.StopCPUProfile()
				}
			}
			switch shape {
			case bench.ShapeRealWorker:
				return bench.RealWorker(ctx, store, stages, workers, batch, real.FailPercent)
			case bench.ShapeStart:
				r, err := bench.Start(ctx, store, real.Probes)
				if err != nil {
					return err
				}
				r.Store = redactURL(url)
				return benchOutput(cmd, asJSON, r, bench.PrintStart)
			case bench.ShapeDeaths:
				r, err := bench.Deaths(ctx, store, schema, items, workers, batch)
				if err != nil {
					return err
				}
				r.Store = redactURL(url)
				return benchOutput(cmd, asJSON, r, bench.PrintDeaths)
			case bench.ShapeReal:
				real.Items, real.Stages, real.Workers, real.Batch = items, stages, workers, batch
				real.Waiting = int(float64(items) * waiting)
				real.URL, real.Schema = url, schema
				r, err := bench.Real(ctx, store, real)
				if err != nil {
					return err
				}
				r.Store = redactURL(url)
				return benchOutput(cmd, asJSON, r, bench.PrintReal)
			}
			if shape == bench.ShapeBacklog {
				waitingN := int(float64(items) * waiting)
				r, err := bench.Backlog(ctx, store, items, waitingN, claimLimit, samples)
				if err != nil {
					return err
				}
				r.Store = redactURL(url)
				return benchOutput(cmd, asJSON, r, bench.PrintBacklog)
			}
			if rounds > 1 {
				rs, err := bench.Rounds(ctx, store, schema, cmd.ErrOrStderr(), rounds, items, stages, workers, batch)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), rs)
				}
				bench.PrintRounds(cmd.OutOrStdout(), redactURL(url), rs)
				return nil
			}
			if err := roundSchemasFree(ctx, store, schema, ratioRounds); err != nil {
				return err
			}
			opts := bench.NoopOptions{Items: items, Stages: stages, Workers: workers, Batch: batch, URL: url, Schema: schema,
				InsertRounds: insertRoundsN, CPUProfile: profile, Checkpoint: checkpoint}
			res, err := bench.NoopWithLimits(ctx, store, opts)
			if err != nil {
				return err
			}
			if ratioRounds > 1 {
				ratios := []float64{res.WorkOverAudited}
				opts.InsertRounds, opts.CPUProfile = 0, nil
				for r := 2; r <= ratioRounds; r++ {
					x, err := ratioRound(ctx, url, t.Kind, schema, r, vacuumAfter, opts)
					if err != nil {
						return err
					}
					ratios = append(ratios, x)
				}
				res.WorkOverAuditedRounds = ratios
				sorted := slices.Sorted(slices.Values(ratios))
				res.WorkOverAuditedMedian = sorted[len(sorted)/2]
			}
			res.Store = redactURL(url)
			return benchOutput(cmd, asJSON, res, bench.PrintNoop)
		},
	}
	cmd.Flags().IntVar(&items, "items", 100000, "items to enqueue")
	cmd.Flags().IntVar(&stages, "stages", 1, "no-op stages in the pipeline")
	cmd.Flags().IntVar(&workers, "workers", 32, "concurrent workers")
	cmd.Flags().IntVar(&batch, "batch", 2000, "claim batch size (0: the engine's default for --workers); large batches suit no-op stages")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile to this file: of the engine's work alone with --shape noop (one round), else of the whole run")
	cmd.Flags().StringVar(&shape, "shape", bench.ShapeNoop, "what to measure: "+bench.ShapeNoop+" (a no-op pipeline), "+bench.ShapeBacklog+
		" (claim latency with items waiting on a backoff, against due items only), "+bench.ShapeReal+
		" (payloads, stages, failures, a waiting backlog, several processes), "+bench.ShapeStart+
		" (enqueue-to-start of single items into an idle engine) or "+bench.ShapeDeaths+
		" (items that all die in their first attempt, alternated with items that all succeed)")
	cmd.Flags().Float64Var(&waiting, "waiting", 0.9, "--shape backlog and real: items waiting on a backoff, as a fraction of --items")
	cmd.Flags().IntVar(&claimLimit, "claim-limit", 100, "--shape backlog: items per timed claim")
	cmd.Flags().IntVar(&samples, "samples", 200, "--shape backlog: timed claims per measurement")
	cmd.Flags().IntVar(&insertRoundsN, "insert-rounds", 5, "--shape noop on PostgreSQL: after the run, measure the insert against COPY this many times more, alternated, in a scratch schema, and print the median ratio (0: skip)")
	cmd.Flags().IntVar(&rounds, "rounds", 1, "--shape noop: work --items this many times on the same store, deleting succeeded items as they finish, and compare the last round with the first (rate, and CPU per item)")
	cmd.Flags().IntVar(&ratioRounds, "ratio-rounds", 1, "--shape noop with one stage: measure the engine against the audited bare loop this many times, each later time on a new store (PostgreSQL: a new schema; SQLite: a new file), and print the median ratio")
	cmd.Flags().BoolVar(&checkpoint, "checkpoint", false, "--shape noop on PostgreSQL: run CHECKPOINT before each measured phase, so that none pays for a checkpoint an earlier one started (needs a superuser or the role pg_checkpoint)")
	cmd.Flags().IntVar(&vacuumAfter, "vacuum-after", 0, "PostgreSQL: items retention deletes between two of the store's own VACUUMs (0: the store's default, 500000; negative: none, autovacuum alone)")
	cmd.Flags().IntVar(&real.Procs, "procs", 1, "--shape real: worker processes, this one included (PostgreSQL)")
	cmd.Flags().IntVar(&real.Payload, "payload", 1024, "--shape real: payload bytes per item")
	cmd.Flags().IntVar(&real.FailPercent, "fail-percent", 5, "--shape real: percentage of attempts that fail and are retried")
	cmd.Flags().IntVar(&real.Probes, "probes", 200, "--shape real and start: single items enqueued into the idle engine to time enqueue-to-start")
	cmd.AddCommand(newBenchOverloadCmd(), newBenchOutageCmd())
	return cmd
}

// checkShape checks the flags of --shape.
func checkShape(shape string, items int, waiting float64, limit, samples int) error {
	switch shape {
	case bench.ShapeNoop, bench.ShapeRealWorker, bench.ShapeStart, bench.ShapeDeaths:
		return nil
	case bench.ShapeReal:
		if waiting < 0 {
			return flagErrorf("waiting", "--waiting must not be negative, not %g", waiting)
		}
		return nil
	case bench.ShapeBacklog:
	default:
		return flagErrorf("shape", "--shape must be %s, %s, %s, %s or %s, not %q", bench.ShapeNoop, bench.ShapeBacklog, bench.ShapeReal,
			bench.ShapeStart, bench.ShapeDeaths, shape)
	}
	if waiting <= 0 || waiting >= 1 {
		return flagErrorf("waiting", "--waiting must be between 0 and 1 (exclusive), not %g", waiting)
	}
	if limit < 1 || samples < 1 {
		return flagErrorf("claim-limit", "--claim-limit and --samples must be at least 1")
	}
	if due := items - int(float64(items)*waiting); due < limit {
		return flagErrorf("items", "--items %d with --waiting %g leaves %d due items, fewer than --claim-limit %d", items, waiting, due, limit)
	}
	return nil
}

// benchDatabase returns the database `redrive bench` writes its items into:
// the --db given on its command line, else a new SQLite file in a temporary
// directory that cleanup removes. REDRIVE_DATABASE_URL is not used: it names
// the user's database, and benchmark data must never land there.
func benchDatabase(cmd *cobra.Command) (url string, cleanup func(), err error) {
	if cmd.Flags().Changed("db") {
		return dbConfigFrom(cmd.Context()).URL, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "redrive-bench-")
	if err != nil {
		return "", nil, err
	}
	return "sqlite:" + filepath.Join(dir, "bench.db"), func() { os.RemoveAll(dir) }, nil
}

// ratioRound measures the engine against the audited bare loop (see
// bench.NoopWithLimits) once more, round r of --ratio-rounds, on a store
// of its own: on PostgreSQL in schema <schema>_round<r>, on SQLite in a new
// file in a temporary directory; either is removed after. A new store for
// each round keeps the rounds alike: on the first round's store a later
// round would find the earlier rounds' items and attempts.
func ratioRound(ctx context.Context, url string, kind storeurl.Kind, schema string, r, vacuumAfter int, o bench.NoopOptions) (float64, error) {
	o.Schema = schema + "_round" + strconv.Itoa(r)
	if kind != storeurl.Postgres {
		dir, err := os.MkdirTemp("", "redrive-bench-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		url = "sqlite:" + filepath.Join(dir, "bench.db")
	}
	o.URL = url
	store, closeStore, err := openStoreWith(ctx, url, openOptions{Schema: o.Schema, Migrate: true, VacuumAfter: vacuumAfter})
	if err != nil {
		return 0, err
	}
	defer closeStore()
	if pg, ok := store.(*postgres.Store); ok {
		defer func() {
			_, _ = pg.Pool().Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{o.Schema}.Sanitize()+" CASCADE")
		}()
	}
	res, err := bench.NoopWithLimits(ctx, store, o)
	if err != nil {
		return 0, fmt.Errorf("bench: ratio round %d: %w", r, err)
	}
	return res.WorkOverAudited, nil
}

// roundSchemasFree returns an error naming the first of the schemas of
// rounds 2 to n of --ratio-rounds (see ratioRound) that already exists in
// the database of store, if it is PostgreSQL's: the rounds make and drop
// their schemas, and must not take one that is someone else's.
func roundSchemasFree(ctx context.Context, store redrive.Store, schema string, n int) error {
	pg, ok := store.(*postgres.Store)
	if !ok {
		return nil
	}
	for r := 2; r <= n; r++ {
		name := schema + "_round" + strconv.Itoa(r)
		var exists bool
		if err := pg.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, name).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return fmt.Errorf("bench: schema %q exists; --ratio-rounds %d makes and drops a schema of that name", name, n)
		}
	}
	return nil
}

// benchOutput writes a bench result r as JSON, or as print writes it.
func benchOutput[T any](cmd *cobra.Command, asJSON bool, r T, print func(io.Writer, T)) error {
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), r)
	}
	print(cmd.OutOrStdout(), r)
	return nil
}
