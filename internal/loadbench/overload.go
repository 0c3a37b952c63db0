package loadbench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// The variants of Overload.
const (
	VariantNaive        = "naive"         // 32 goroutines, a fixed 100 ms after a 429
	VariantNaiveNoRA    = "naive-no-ra"   // the same against 429s without Retry-After
	VariantEngine       = "engine"        // the Go engine, a handler over retryhttp.Transport
	VariantEngineNoRA   = "engine-no-ra"  // the same against 429s without Retry-After
	VariantRunner       = "runner"        // `redrive run`, an http stage
	VariantRunnerNoRA   = "runner-no-ra"  // the same against 429s without Retry-After
	VariantPostgres     = "postgres"      // Procs worker processes on PostgreSQL
	VariantPostgresRate = "postgres-rate" // the same with the stage's rate limit set to C, shared in the database
	VariantNginxNaive   = "nginx-naive"   // the naive loop against nginx limit_req
	VariantNginxEngine  = "nginx-engine"  // the engine against nginx limit_req
	VariantNginxRunner  = "nginx-runner"  // `redrive run` against nginx limit_req
)

// AllVariants lists every variant of Overload in the order it runs them.
var AllVariants = []string{
	VariantNaive, VariantEngine, VariantRunner,
	VariantNaiveNoRA, VariantEngineNoRA, VariantRunnerNoRA,
	VariantPostgres, VariantPostgresRate,
	VariantNginxNaive, VariantNginxEngine, VariantNginxRunner,
}

// OverloadOptions configure Overload. Zero values take the stated defaults.
type OverloadOptions struct {
	// Items is how many items each variant does. Default 3000.
	Items int
	// Workers is how many workers call the server (split across processes in the
	// postgres variant). Default 32.
	Workers int
	// Rate is the limit C in requests per second. Default 50.
	Rate float64
	// Burst is the token bucket's size (and nginx's burst). Default: Rate.
	Burst int
	// RetryAfter is the Retry-After of the variants that send one. Default 1 s.
	RetryAfter time.Duration
	// Variants selects variants by name (see AllVariants). Default: all but those whose
	// prerequisites are missing (Exe, PostgresURL, Nginx).
	Variants []string
	// Limit bounds one variant's time; items not finished by then count as unfinished.
	// Default 5 minutes.
	Limit time.Duration
	// Exe is the redrive command, run for the runner and postgres variants. Default "":
	// those variants are skipped.
	Exe string
	// PostgresURL is the database of the postgres variant, which works in a fresh schema
	// that it drops afterwards. Default "": that variant is skipped.
	PostgresURL string
	// Procs is how many worker processes the postgres variant starts. Default 3.
	Procs int
	// Nginx is the nginx program of the nginx variants. Default "": they are skipped.
	Nginx string
	// Log receives a line as each variant starts and ends. Default nil: none.
	Log io.Writer
	// ServerProcess runs the token-bucket server of the variants other than nginx in a
	// process of its own (Exe bench overload server), so that a stall of the process
	// under test (the engine variants run in the benchmark's process) does not also
	// stall the server that counts arrivals. Default false: the server runs in the
	// benchmark's process.
	ServerProcess bool
	// Trace, when not nil, receives every 100 ms window above 2 C with its time relative
	// to the 429s (TraceBursts). Default nil: none.
	Trace io.Writer
}

func (o OverloadOptions) withDefaults() OverloadOptions {
	if o.Items <= 0 {
		o.Items = 3000
	}
	if o.Workers <= 0 {
		o.Workers = 32
	}
	if o.Rate <= 0 {
		o.Rate = 50
	}
	if o.Burst <= 0 {
		o.Burst = int(o.Rate)
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Second
	}
	if o.Limit <= 0 {
		o.Limit = 5 * time.Minute
	}
	if o.Procs <= 0 {
		o.Procs = 3
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if len(o.Variants) == 0 {
		for _, v := range AllVariants {
			switch {
			case (v == VariantRunner || v == VariantRunnerNoRA || v == VariantNginxRunner || strings.HasPrefix(v, VariantPostgres)) && o.Exe == "":
			case strings.HasPrefix(v, VariantPostgres) && o.PostgresURL == "":
			case strings.HasPrefix(v, "nginx") && o.Nginx == "":
			default:
				o.Variants = append(o.Variants, v)
			}
		}
	}
	return o
}

// Overload runs the overload benchmark's variants one after the other, each against a
// fresh server, and returns what each measured.
func Overload(ctx context.Context, o OverloadOptions) ([]Result, error) {
	o = o.withDefaults()
	for _, v := range o.Variants {
		if !slices.Contains(AllVariants, v) {
			return nil, fmt.Errorf("loadbench: unknown variant %q (want one of %s)", v, strings.Join(AllVariants, ", "))
		}
	}
	var out []Result
	for _, v := range o.Variants {
		fmt.Fprintf(o.Log, "%s: %s started\n", time.Now().UTC().Format("15:04:05"), v)
		r, err := runVariant(ctx, o, v)
		if err != nil {
			return out, fmt.Errorf("loadbench: variant %s: %w", v, err)
		}
		fmt.Fprintf(o.Log, "%s: %s: %d succeeded, %d dead, %d unfinished, %d requests in %.1f s\n",
			time.Now().UTC().Format("15:04:05"), v, r.Succeeded, r.Dead, r.Unfinished, r.Requests(), r.Elapsed.Seconds())
		if o.Trace != nil {
			TraceBursts(o.Trace, r, 2)
			TraceSends(o.Trace, r, 2)
		}
		out = append(out, r)
	}
	return out, nil
}

func runVariant(ctx context.Context, o OverloadOptions, v string) (Result, error) {
	if strings.HasPrefix(v, "nginx") {
		return runNginxVariant(ctx, o, v)
	}
	so := ServerOptions{Rate: o.Rate, Burst: o.Burst, RetryAfter: o.RetryAfter}
	if strings.HasSuffix(v, "-no-ra") {
		so.RetryAfter = 0
	}
	var (
		srv     *Server
		proc    *serverProc
		base    string
		zero    time.Time
		srvDone bool
	)
	if o.ServerProcess && o.Exe != "" {
		if so.Burst <= 0 {
			so.Burst = int(so.Rate)
		}
		p, err := startServerProc(ctx, o.Exe, so)
		if err != nil {
			return Result{}, err
		}
		defer func() {
			if !srvDone {
				_, _ = p.finish()
			}
		}()
		proc, base, zero = p, p.URL, p.Start
	} else {
		s, err := StartServer(so)
		if err != nil {
			return Result{}, err
		}
		defer s.Close()
		srv, base, zero = s, s.URL, s.Rec.Start
	}
	r := Result{Name: v, Items: o.Items, Workers: o.Workers, Capacity: o.Rate, Width: 100 * time.Millisecond}
	if srv != nil {
		r.Width = srv.Rec.Width
	}
	start := time.Now()
	var stalls *stallWatch
	var stopWatch context.CancelFunc = func() {}
	if o.Trace != nil {
		var wctx context.Context
		wctx, stopWatch = context.WithCancel(ctx)
		stalls = watchStalls(wctx, zero, 20*time.Millisecond)
	}
	defer stopWatch()
	vctx, cancel := context.WithTimeout(ctx, o.Limit)
	defer cancel()
	url := base + "/v1/complete"
	var err error
	var c counts
	switch v {
	case VariantNaive, VariantNaiveNoRA:
		c, err = runNaive(vctx, url, o.Items, o.Workers)
	case VariantEngine, VariantEngineNoRA:
		c, err = runEngine(vctx, url, o.Items, o.Workers)
	case VariantRunner, VariantRunnerNoRA:
		c, err = runRunner(vctx, o.Exe, url, o.Items, o.Workers)
	case VariantPostgres, VariantPostgresRate:
		rate := 0.0
		if v == VariantPostgresRate {
			rate = o.Rate
		}
		c, err = runProcs(vctx, o, url, rate)
		r.Workers = o.Procs * perProc(o.Workers, o.Procs)
	}
	if err != nil {
		return r, err
	}
	r.Elapsed = time.Since(start)
	r.Succeeded, r.Dead, r.Canceled, r.Unfinished = c.succeeded, c.dead, c.canceled, o.Items-c.succeeded-c.dead-c.canceled
	if stalls != nil {
		r.Stalls = stalls.stop(stopWatch)
	}
	if proc != nil {
		srvDone = true
		rep, err := proc.finish()
		if err != nil {
			return r, err
		}
		r.Windows, r.Conns, r.Stamps = rep.Windows, rep.Conns, rep.Stamps
		r.ServerStalls = rep.Stalls
		if r.ServerStalls == nil {
			r.ServerStalls = []Stall{} // watched, none seen
		}
		return r, nil
	}
	r.Windows, r.Conns, r.Stamps = srv.Rec.Windows(), srv.Conns(), srv.Rec.Stamps()
	return r, nil
}

// counts are the ends of a variant's items.
type counts struct{ succeeded, dead, canceled int }

// perProc splits workers across procs processes, rounding up.
func perProc(workers, procs int) int { return (workers + procs - 1) / procs }
