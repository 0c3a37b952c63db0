package loadbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
)

// WorkerOptions configure Work.
type WorkerOptions struct {
	// DB is the PostgreSQL URL and Schema the schema holding the run. Both required.
	DB, Schema string
	// URL is the server's endpoint. Required.
	URL string
	// Workers is this process's workers. Default 16 (the engine's default).
	Workers int
	// RunID is the run to work until it ends. Required.
	RunID int64
	// Rate, when above 0, is the stage's configured rate limit, shared by every process
	// through the database. Default 0: the stage adapts to an unknown limit.
	Rate float64
}

// Work is one worker process of the postgres variant: it works the benchmark's pipeline
// with the Go engine (a handler over a zero retryhttp.Transport) until the run has ended.
func Work(ctx context.Context, o WorkerOptions) error {
	store, err := postgres.Open(ctx, o.DB, postgres.Options{Schema: o.Schema})
	if err != nil {
		return err
	}
	defer store.Close()
	hc := &http.Client{Transport: benchTransport()}
	client := redrive.NewClient(store, redrive.Config{Workers: o.Workers, RunCheckInterval: 200 * time.Millisecond})
	p := Pipeline(hc, o.URL)
	p.Stages[0].RateLimit.Rate = o.Rate
	if err := client.Register(p); err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	_, werr := client.WaitRun(ctx, o.RunID)
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Stop(sctx); err != nil {
		return err
	}
	return werr
}

// runProcs enqueues the items in a fresh PostgreSQL schema and starts o.Procs processes
// `redrive bench overload worker` that share them (with the stage's rate limit set to
// rate when it is above 0), then waits for the run to end.
func runProcs(ctx context.Context, o OverloadOptions, url string, rate float64) (counts, error) {
	schema := "redrive_overload_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	store, err := postgres.Open(ctx, o.PostgresURL, postgres.Options{Schema: schema, Migrate: true})
	if err != nil {
		return counts{}, err
	}
	defer store.Close()
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = store.Pool().Exec(dctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}()
	client := redrive.NewClient(store, redrive.Config{RunCheckInterval: 200 * time.Millisecond})
	if err := client.Register(Pipeline(http.DefaultClient, url)); err != nil {
		return counts{}, err
	}
	run, err := client.StartRun(ctx, PipelineName, Items(o.Items), redrive.RunOptions{})
	if err != nil {
		return counts{}, err
	}
	type proc struct {
		cmd    *exec.Cmd
		stderr bytes.Buffer
	}
	procs := make([]*proc, o.Procs)
	for i := range procs {
		p := &proc{}
		p.cmd = exec.CommandContext(ctx, o.Exe, "bench", "overload", "worker", "--db", o.PostgresURL, "--pg-schema", schema,
			"--url", url, "--workers", strconv.Itoa(perProc(o.Workers, o.Procs)), "--run", strconv.FormatInt(run.ID, 10),
			"--rate", strconv.FormatFloat(rate, 'g', -1, 64))
		p.cmd.Stderr = &p.stderr
		if err := p.cmd.Start(); err != nil {
			return counts{}, fmt.Errorf("start worker process: %w", err)
		}
		procs[i] = p
	}
	run, werr := client.WaitRun(ctx, run.ID)
	var perr error
	for _, p := range procs {
		if err := p.cmd.Wait(); err != nil && ctx.Err() == nil {
			perr = errors.Join(perr, fmt.Errorf("worker process: %w: %s", err, bytes.TrimSpace(p.stderr.Bytes())))
		}
	}
	if perr != nil {
		return counts{}, perr
	}
	if werr != nil && !errors.Is(werr, context.DeadlineExceeded) {
		return counts{}, werr
	}
	gctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if run, err = store.GetRun(gctx, run.ID); err != nil {
		return counts{}, err
	}
	return counts{succeeded: run.Counts.Succeeded, dead: run.Counts.Dead, canceled: run.Counts.Canceled}, nil
}
