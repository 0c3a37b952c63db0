// Command riverbench works n no-op jobs with River v0.51.1 on PostgreSQL, as
// `redrive bench` works n no-op items: insert (InsertManyFast, COPY, in
// batches of 5,000), then Start and the time until the last job ran.
//
// It is a module of its own, so that River is no dependency of redrive:
//
//	cd scripts/riverbench && go run . --items 100000 --db postgres://…
//
// It works in a new schema (river_bench_<time>) that it drops afterwards.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done  *atomic.Int64
	total int64
	end   chan time.Time
}

func (w *noopWorker) Work(ctx context.Context, j *river.Job[noopArgs]) error {
	if w.done.Add(1) == w.total {
		w.end <- time.Now()
	}
	return nil
}

func main() {
	db := flag.String("db", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "database")
	items := flag.Int("items", 200000, "jobs")
	workers := flag.Int("workers", 2000, "MaxWorkers")
	cooldown := flag.Duration("cooldown", time.Millisecond, "FetchCooldown")
	flag.Parse()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *db)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	schema := "river_bench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		log.Fatal(err)
	}
	defer pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	drv := riverpgxv5.New(pool)
	m, err := rivermigrate.New(drv, &rivermigrate.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		log.Fatal(err)
	}
	var done atomic.Int64
	end := make(chan time.Time, 1)
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{done: &done, total: int64(*items), end: end})
	c, err := river.NewClient(drv, &river.Config{Schema: schema, Workers: ws, FetchCooldown: *cooldown,
		FetchPollInterval: max(*cooldown, river.FetchPollIntervalMin),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *workers}}})
	if err != nil {
		log.Fatal(err)
	}
	t0 := time.Now()
	params := make([]river.InsertManyParams, 5000)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	for left := *items; left > 0; left -= len(params) {
		if _, err := c.InsertManyFast(ctx, params[:min(left, len(params))]); err != nil {
			log.Fatal(err)
		}
	}
	ins := time.Since(t0)
	t1 := time.Now()
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	e := <-end
	work := e.Sub(t1)
	_ = c.Stop(ctx)
	fmt.Printf("river insert %.0f jobs/s  work %.0f jobs/s (%d jobs, MaxWorkers %d, FetchCooldown %s)\n",
		float64(*items)/ins.Seconds(), float64(*items)/work.Seconds(), *items, *workers, *cooldown)
}
