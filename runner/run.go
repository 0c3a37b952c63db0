package runner

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/storeurl"
)

// Options configure Execute. Zero values take the stated defaults.
type Options struct {
	// Input is the JSONL file of items. Required.
	Input string
	// DB is the database: "sqlite:PATH", "postgres://..." or a bare path
	// (SQLite). It names the database in the summary's commands and is
	// opened with storeurl.Open unless Store is set. Default DefaultDB
	// ("sqlite:redrive.db", in the current directory, as for every redrive
	// command).
	DB string
	// Store, when set, is used instead of opening DB; Execute does not
	// close it. Default nil.
	Store redrive.Store
	// Workers is how many attempts run at once. Default: the file's
	// workers, else DefaultWorkers (8).
	Workers int
	// RunName names the run; running again with the same name and database
	// resumes it, provided the input file's content is the same (else
	// Execute fails with ErrUsage wrapping redrive.ErrRunMismatch).
	// Default: DefaultRunName(spec, Input, its content hash), so that the
	// same input resumes its run and other input makes a new one.
	RunName string
	// Run overrides the file's run options field by field.
	Run RunSpec
	// Output, when set, receives the succeeded items' final payloads as
	// JSONL in item order. Default: none.
	Output string
	// Progress receives progress lines. Default nil: no progress.
	Progress io.Writer
	// Terminal redraws one progress line with \r instead of printing a
	// line every ProgressInterval. Default false.
	Terminal bool
	// ProgressInterval is how often a progress line is printed when not on a
	// terminal. Default 5 s. On a terminal the line is redrawn every 250 ms.
	ProgressInterval time.Duration
	// LeaseDuration is how long an item stays claimed by a runner that
	// vanished (killed, crashed) before another run takes it over.
	// Default 30 s.
	LeaseDuration time.Duration
	// StopGrace is how long a graceful stop (ctx canceled) lets running
	// attempts finish before interrupting them. Default 30 s.
	StopGrace time.Duration
	// Observers receive the engine's events beside the progress line (the
	// metrics package's Observe, to export the run's metrics). Default none.
	Observers []func(redrive.Event)
	// Logger receives the engine's log lines. Default none.
	Logger *slog.Logger
	// Started is called with the engine's client once it has started, before
	// the run is awaited: the metrics package's TrackFlows takes its
	// FlowStates from there. Default nil: nothing is called.
	Started func(*redrive.Client)
	// TracerProvider makes a span of every attempt (redrive.Config.TracerProvider),
	// and http stages send it as their requests' traceparent. Default nil:
	// no tracing.
	TracerProvider trace.TracerProvider
}

// DefaultDB is the database used when Options.DB is empty: the file
// redrive.db in the current directory, the default of every redrive command.
const DefaultDB = "sqlite:redrive.db"

// DefaultRunName is the run name used when Options.RunName is empty:
// "<pipeline name>:<input file's base name>@<first 12 hex digits of its
// content hash>", so that the same command over the same input resumes the
// same run, and an input file of the same name with other content (say
// feb/items.jsonl after jan/items.jsonl) makes a run of its own. hash is
// InputHash's result.
func DefaultRunName(s *Spec, input, hash string) string {
	h := strings.TrimPrefix(hash, "sha256:")
	return s.Name + ":" + filepath.Base(input) + "@" + h[:min(12, len(h))]
}

// InputHash returns "sha256:<hex>" of the file's content: a run records it
// (redrive.RunOptions.SourceHash) and is resumed only with the same input.
func InputHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("runner: input: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("runner: input %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// Pipeline builds the engine pipeline of a spec. It fails for a stage
// without exec, http or external (a policy-only file).
func (s *Spec) Pipeline() (redrive.Pipeline, error) {
	p := redrive.Pipeline{Name: s.Name, MaxAttempts: s.MaxAttempts}
	for i := range s.Stages {
		st := &s.Stages[i]
		var h redrive.Handler
		timeout := time.Duration(st.Timeout)
		if !st.External {
			var err error
			if h, err = s.handler(st); err != nil {
				return p, err
			}
			if timeout == 0 {
				timeout = DefaultStageTimeout
			}
		}
		pol, err := st.Retry.policy()
		if err != nil {
			return p, specError(s.File, err)
		}
		p.Stages = append(p.Stages, redrive.Stage{Name: st.Name, Handle: h, External: st.External, Policy: pol, Timeout: timeout, Concurrency: st.inFlight(),
			CountRateLimitWaits: st.Retry.CountRateLimitWaits, RateLimit: st.rateLimit(), Dependency: st.Dependency})
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("%s: %w", s.File, err)
	}
	return p, nil
}

// ErrUsage is wrapped by errors that a corrected command line or pipeline
// file fixes (exit status 2).
var ErrUsage = errors.New("runner: bad usage")

// Execute runs the pipeline of s over the items of opts.Input until the run
// ends, and returns its summary. Canceling ctx stops gracefully: no new
// attempts start, running ones get opts.StopGrace to finish, and the
// summary comes back with Interrupted set (the same command resumes).
func Execute(ctx context.Context, s *Spec, opts Options) (*Summary, error) {
	start := time.Now()
	if opts.Input == "" {
		return nil, fmt.Errorf("%w: no input file (--input)", ErrUsage)
	}
	if opts.DB == "" {
		opts.DB = DefaultDB
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = s.Workers
	}
	if workers <= 0 {
		workers = DefaultWorkers
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = 30 * time.Second
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = 30 * time.Second
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = 5 * time.Second
	}
	runOpts := merge(s.Run, opts.Run).Options()
	if err := runOpts.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	pipeline, err := s.Pipeline()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	for i, st := range s.Stages {
		if st.External {
			// Nothing in this process could work it: its workers lease
			// from a server, and the run would wait for ever.
			return nil, fmt.Errorf("%w: %s:%d: stage %q is external: its workers lease items from `redrive serve`; serve the pipeline (redrive serve --pipeline %s) and submit the items to it (redrive enqueue or the API)",
				ErrUsage, s.File, s.Stages[i].Pos.Line, st.Name, s.File)
		}
	}
	lines, err := ReadInput(opts.Input)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %w", ErrUsage, err)
		}
		return nil, err
	}
	hash, err := InputHash(opts.Input)
	if err != nil {
		return nil, err
	}
	if opts.RunName == "" {
		opts.RunName = DefaultRunName(s, opts.Input, hash)
	}
	runOpts.Source, runOpts.SourceHash = opts.Input, hash

	// The store outlives ctx: a graceful stop still records and releases.
	bg := context.WithoutCancel(ctx)
	store := opts.Store
	if store == nil {
		if store, err = storeurl.Open(bg, opts.DB, storeurl.Options{}); err != nil {
			return nil, fmt.Errorf("runner: open database %s: %w", storeurl.Redact(opts.DB), err)
		}
		defer store.Close()
	}

	prog := newProgress(opts, s.Name)
	client := redrive.NewClient(store, redrive.Config{
		Workers:        workers,
		LeaseDuration:  opts.LeaseDuration,
		RescueInterval: min(5*time.Second, max(opts.LeaseDuration/2, 100*time.Millisecond)),
		// Someone is waiting for the summary: notice the run's end sooner
		// than a long-lived worker process needs to.
		RunCheckInterval: 200 * time.Millisecond,
		Observers:        append([]func(redrive.Event){prog.observe}, opts.Observers...),
		Logger:           opts.Logger,
		TracerProvider:   opts.TracerProvider,
	})
	if err := client.Register(pipeline); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	runOpts.Name = opts.RunName
	run, err := client.StartRun(ctx, pipeline.Name, nil, runOpts)
	if errors.Is(err, redrive.ErrRunMismatch) {
		return nil, fmt.Errorf("%w: %w: give another --run-name for a new run, or the input this run was made from to resume it", ErrUsage, err)
	}
	if err != nil {
		return nil, interrupted(ctx, fmt.Errorf("runner: start run: %w", err))
	}
	items := make([]redrive.NewItem, len(lines))
	invalid := 0
	for i, l := range lines {
		items[i] = redrive.NewItem{Key: ItemKey(run.ID, l.ID), Payload: l.Payload, Invalid: l.Invalid, OrderAt: l.OrderAt}
		if l.Invalid != "" {
			invalid++
		}
	}
	enq, err := client.AddItems(ctx, run.ID, items)
	if err != nil {
		return nil, interrupted(ctx, fmt.Errorf("runner: add items: %w", err))
	}
	sum := &Summary{RunID: run.ID, RunName: opts.RunName, Pipeline: pipeline.Name, DB: opts.DB, Spec: s.File,
		Input: InputCounts{File: opts.Input, Items: len(lines), Invalid: invalid}}
	for _, e := range enq {
		if e.Existing {
			sum.Input.Existing++
		} else {
			sum.Input.Added++
		}
	}
	sum.Resumed = sum.Input.Existing > 0

	if err := client.Start(bg); err != nil {
		return nil, fmt.Errorf("runner: start: %w", err)
	}
	if opts.Started != nil {
		opts.Started(client)
	}
	prog.start(bg, store, run.ID)

	waitCtx, cancelWait := context.WithCancel(ctx)
	final, werr := client.WaitRun(waitCtx, run.ID)
	cancelWait()
	if werr != nil && ctx.Err() != nil {
		sum.Interrupted = true
		if opts.Progress != nil {
			prog.stop()
			fmt.Fprintf(opts.Progress, "redrive: stopping: waiting up to %v for running attempts (interrupt again to stop at once)\n", opts.StopGrace)
		}
	} else if werr != nil {
		prog.stop()
		client.Stop(bg)
		return nil, fmt.Errorf("runner: %w", werr)
	}
	// The flow control's waits live in the client, which Stop lets go of.
	flows := client.FlowStates()
	stopCtx, cancelStop := context.WithTimeout(bg, opts.StopGrace)
	stopErr := client.Stop(stopCtx)
	cancelStop()
	prog.stop()
	if stopErr != nil {
		return nil, fmt.Errorf("runner: %w", stopErr)
	}
	if sum.Interrupted {
		final, err = store.GetRun(bg, run.ID)
		if err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
	}
	if err := sum.fill(bg, store, final, prog); err != nil {
		return nil, err
	}
	sum.Paced = paceWaits(pipeline.Name, flows)
	if opts.Output != "" {
		n, err := writeOutput(bg, store, run.ID, opts.Output)
		if err != nil {
			return sum, err
		}
		sum.Output, sum.OutputItems = opts.Output, n
	}
	sum.Elapsed = Seconds(time.Since(start).Seconds())
	return sum, nil
}

// ErrInterrupted is wrapped by the error of Execute when ctx ended before
// the run started (while its items were being added). Items added before
// are kept; the same command resumes.
var ErrInterrupted = errors.New("runner: interrupted")

func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ErrInterrupted, err)
	}
	return err
}

// merge returns file with the fields set in override replaced.
func merge(file, override RunSpec) RunSpec {
	if override.SuccessThreshold != nil {
		file.SuccessThreshold = override.SuccessThreshold
	}
	if override.PartialThreshold != nil {
		file.PartialThreshold = override.PartialThreshold
	}
	if override.FailureBudget != nil {
		file.FailureBudget = override.FailureBudget
	}
	if override.MinItems != nil {
		file.MinItems = override.MinItems
	}
	return file
}

// ItemKey scopes an input line's id to its run: keys are unique per
// pipeline in the database, ids only per input file.
func ItemKey(runID int64, id string) string { return fmt.Sprintf("%d/%s", runID, id) }

// itemID returns the input id of an item key made by ItemKey.
func itemID(key string) string {
	if _, id, ok := strings.Cut(key, "/"); ok {
		return id
	}
	return key
}

// writeOutput writes the succeeded items of a run as JSONL
// {"id": ..., "output": ...} in item ID order, through a temporary file
// renamed into place.
func writeOutput(ctx context.Context, store redrive.Store, runID int64, path string) (int, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return 0, fmt.Errorf("runner: output: %w", err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriterSize(tmp, 1<<16)
	n := 0
	var after int64
	for {
		items, err := store.ListItems(ctx, redrive.ItemFilter{RunID: runID, States: []redrive.State{redrive.StateSucceeded}, AfterID: after, Limit: 1000})
		if err != nil {
			tmp.Close()
			return n, fmt.Errorf("runner: output: %w", err)
		}
		for _, it := range items {
			out := json.RawMessage(it.Payload)
			if !json.Valid(out) {
				out, _ = json.Marshal(string(it.Payload))
			}
			line, err := json.Marshal(struct {
				ID     string          `json:"id"`
				Output json.RawMessage `json:"output"`
			}{itemID(it.Key), out})
			if err != nil {
				tmp.Close()
				return n, fmt.Errorf("runner: output: %w", err)
			}
			w.Write(line)
			w.WriteByte('\n')
			n++
			after = it.ID
		}
		if len(items) < 1000 {
			break
		}
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return n, fmt.Errorf("runner: output: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return n, fmt.Errorf("runner: output: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return n, fmt.Errorf("runner: output: %w", err)
	}
	return n, nil
}

// progress counts engine events and prints progress lines.
type progress struct {
	w        io.Writer
	terminal bool
	interval time.Duration
	name     string

	mu          sync.Mutex
	retrying    map[int64]bool // items waiting for a retry
	rateLimited map[int64]bool // of which after a rate limit
	retries     int            // retries scheduled by this process
	rlWaits     int            // rate-limited waits scheduled by this process

	cancel context.CancelFunc
	done   chan struct{}
}

func newProgress(o Options, name string) *progress {
	return &progress{w: o.Progress, terminal: o.Terminal, interval: o.ProgressInterval, name: name,
		retrying: map[int64]bool{}, rateLimited: map[int64]bool{}}
}

func (p *progress) observe(ev redrive.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e := ev.(type) {
	case redrive.RetryScheduled:
		p.retrying[e.ItemID] = true
		if e.RateLimited {
			p.rlWaits++
			p.rateLimited[e.ItemID] = true
		} else {
			p.retries++
			delete(p.rateLimited, e.ItemID)
		}
	case redrive.AttemptFinished:
		if e.Outcome != redrive.OutcomeRetry && e.Outcome != redrive.OutcomeRateLimited && e.Outcome != redrive.OutcomeLost {
			delete(p.retrying, e.ItemID)
			delete(p.rateLimited, e.ItemID)
		}
	case redrive.DeadLettered:
		delete(p.retrying, e.ItemID)
		delete(p.rateLimited, e.ItemID)
	}
}

func (p *progress) counts() (retrying, rateLimited, retries, rlWaits int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.retrying), len(p.rateLimited), p.retries, p.rlWaits
}

func (p *progress) start(ctx context.Context, store redrive.Store, runID int64) {
	p.done = make(chan struct{})
	ctx, p.cancel = context.WithCancel(ctx)
	if p.w == nil {
		close(p.done)
		return
	}
	every := p.interval
	if p.terminal {
		every = 250 * time.Millisecond
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		began := time.Now()
		first := 0
		if r, err := store.GetRun(ctx, runID); err == nil {
			first = r.Counts.Finished()
		}
		for {
			select {
			case <-ctx.Done():
				if p.terminal {
					fmt.Fprint(p.w, "\r\033[K")
				}
				return
			case <-t.C:
			}
			r, err := store.GetRun(ctx, runID)
			if err != nil {
				continue
			}
			c := r.Counts
			done := c.Finished()
			el := time.Since(began).Seconds()
			rate := 0.0
			if el > 0 {
				rate = float64(done-first) / el
			}
			eta := "?"
			if left := c.Total - done; left == 0 {
				eta = "0s"
			} else if rate > 0 {
				eta = time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second).String()
			}
			retrying, rl, _, _ := p.counts()
			pct := 0.0
			if c.Total > 0 {
				pct = 100 * float64(done) / float64(c.Total)
			}
			line := fmt.Sprintf("[%s] %d/%d done (%.0f%%) · %d succeeded · %d dead · %d retrying (%d rate-limited) · %.1f/s · ETA %s",
				p.name, done, c.Total, pct, c.Succeeded, c.Dead, retrying, rl, rate, eta)
			if p.terminal {
				fmt.Fprint(p.w, "\r\033[K"+line)
			} else {
				fmt.Fprintln(p.w, line)
			}
		}
	}()
}

func (p *progress) stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	<-p.done
}
