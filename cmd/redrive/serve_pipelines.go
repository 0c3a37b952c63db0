package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/runner"
)

// pipelineSet is what serve loaded from its pipeline files: the pipelines,
// their webhooks, and the largest workers: of the files.
type pipelineSet struct {
	files     []string
	pipelines []redrive.Pipeline
	hooks     []redrive.Webhook
	workers   int
	// alerts are the files' alert thresholds by pipeline.
	alerts map[string]runner.AlertsSpec
}

func (ps *pipelineSet) names() []string {
	out := make([]string, len(ps.pipelines))
	for i, p := range ps.pipelines {
		out[i] = p.Name
	}
	return out
}

// expandPipelinePaths turns the arguments of --pipeline and --pipelines
// into files: a directory gives its *.yaml and *.yml files (not those of
// subdirectories), a pattern with *, ? or [ gives its matches, anything
// else is a file. A directory or pattern that names no file is an error,
// so that a typo does not start a server that works nothing.
func expandPipelinePaths(args []string) ([]string, error) {
	var files []string
	for _, a := range args {
		if strings.ContainsAny(a, "*?[") {
			m, err := filepath.Glob(a)
			if err != nil {
				return nil, fmt.Errorf("--pipelines %s: %w", a, err)
			}
			if len(m) == 0 {
				return nil, fmt.Errorf("--pipelines %s: no file matches", a)
			}
			files = append(files, m...)
			continue
		}
		fi, err := os.Stat(a)
		if err != nil {
			return nil, fmt.Errorf("--pipelines %s: %w", a, err)
		}
		if !fi.IsDir() {
			files = append(files, a)
			continue
		}
		var in []string
		for _, ext := range []string{"*.yaml", "*.yml"} {
			m, err := filepath.Glob(filepath.Join(globEscape(a), ext))
			if err != nil {
				return nil, fmt.Errorf("--pipelines %s: %w", a, err)
			}
			in = append(in, m...)
		}
		if len(in) == 0 {
			return nil, fmt.Errorf("--pipelines %s: the directory has no *.yaml or *.yml file", a)
		}
		sort.Strings(in)
		files = append(files, in...)
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}

// globEscape escapes the pattern characters of a directory name.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// loadPipelineSet loads and checks every pipeline file of args. Any error
// (a file, a line, an unset ${VAR}, two files naming one pipeline) fails
// the whole set, so that a reload applies all files or none.
func loadPipelineSet(args []string) (*pipelineSet, error) {
	files, err := expandPipelinePaths(args)
	if err != nil {
		return nil, err
	}
	set := &pipelineSet{files: files, alerts: map[string]runner.AlertsSpec{}}
	seen := map[string]string{}
	for _, file := range files {
		spec, err := runner.LoadFile(file)
		if err != nil {
			return nil, err
		}
		if other, dup := seen[spec.Name]; dup {
			return nil, fmt.Errorf("%s: pipeline %q is also defined in %s", file, spec.Name, other)
		}
		seen[spec.Name] = file
		p, err := spec.Pipeline()
		if err != nil {
			return nil, err
		}
		hook, err := spec.WebhookConfig()
		if err != nil {
			return nil, err
		}
		set.pipelines = append(set.pipelines, p)
		set.alerts[spec.Name] = spec.Alerts
		if hook != nil {
			set.hooks = append(set.hooks, *hook)
		}
		set.workers = max(set.workers, spec.Workers)
	}
	return set, nil
}

// workerGroup runs the workers of serve's pipeline files, a redrive.Client
// and a webhook Deliverer, and replaces them when the files are reloaded.
type workerGroup struct {
	store     redrive.Store
	workers   int // --workers; 0: the files'
	lease     time.Duration
	logger    *slog.Logger
	observers []func(redrive.Event)
	// callbackSecret signs the callbacks of pipelines without a webhook;
	// nil: only those of pipelines with one are signed (and accepted).
	callbackSecret []byte
	// callbackAllowPrivate is --callback-allow-private.
	callbackAllowPrivate bool
	// publicURL is --public-url: the base of the item URLs in
	// notifications.
	publicURL string
	// tracerProvider makes the attempts' spans (--otlp-endpoint); nil:
	// tracing off.
	tracerProvider trace.TracerProvider
	// hooked holds the pipelines with a webhook in the running set.
	hooked atomic.Pointer[map[string]bool]
	// alerts, when set, receives the alert thresholds of the running set
	// (the metrics read it at each refresh).
	alerts *atomic.Pointer[map[string]runner.AlertsSpec]

	// running is the started client, for the metrics' flow states; nil
	// while the workers are stopped. Read without mu, so that a scrape is
	// never held up by a reload.
	running atomic.Pointer[redrive.Client]

	mu      sync.Mutex
	current *pipelineSet
	client  *redrive.Client
	stopDel context.CancelFunc
	delDone chan struct{}
}

// start starts workers for set. The group must be stopped.
func (g *workerGroup) start(set *pipelineSet) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	workers := g.workers
	if workers == 0 {
		workers = set.workers
	}
	c := redrive.NewClient(g.store, redrive.Config{Workers: workers, Logger: g.logger, Observers: g.observers,
		LeaseDuration: g.lease, TracerProvider: g.tracerProvider})
	for _, p := range set.pipelines {
		if err := c.Register(p); err != nil {
			return fmt.Errorf("pipeline %q: %w", p.Name, err)
		}
	}
	var del *redrive.Deliverer
	if len(set.hooks) > 0 || len(g.callbackSecret) > 0 {
		ob, ok := g.store.(redrive.Outbox)
		if !ok {
			return errors.New("the database keeps no outbox: webhooks need the SQLite or PostgreSQL store")
		}
		var err error
		cfg := redrive.DelivererConfig{Webhooks: set.hooks, Logger: g.logger, LeaseDuration: g.lease, Owner: delivererOwner(),
			CallbackAllowPrivate: g.callbackAllowPrivate, APIURL: g.publicURL}
		if len(g.callbackSecret) > 0 {
			cfg.CallbackPipelines, cfg.CallbackSecret = set.names(), g.callbackSecret
		}
		del, err = redrive.NewDeliverer(ob, cfg)
		if err != nil {
			return err
		}
		// Subscribed before the workers start, so that no state change of
		// theirs goes unannounced.
		if err := del.Subscribe(context.Background()); err != nil {
			return fmt.Errorf("subscribe webhooks: %w", err)
		}
	}
	if err := c.Start(context.Background()); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	g.client, g.current = c, set
	g.running.Store(c)
	hooked := make(map[string]bool, len(set.hooks))
	for _, h := range set.hooks {
		hooked[h.Pipeline] = true
	}
	g.hooked.Store(&hooked)
	if g.alerts != nil {
		g.alerts.Store(&set.alerts)
	}
	if del != nil {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = del.Run(ctx)
		}()
		g.stopDel, g.delDone = cancel, done
	}
	hooks := make([]string, len(set.hooks))
	for i, h := range set.hooks {
		hooks[i] = h.Pipeline
	}
	g.logger.Info("redrive serve running workers", "pipelines", set.names(), "files", len(set.files),
		"workers", workers, "webhooks", hooks)
	return nil
}

// flowStates returns the flow control of the running workers' stages (see
// redrive.Client.FlowStates); nil while none run.
func (g *workerGroup) flowStates() []redrive.FlowState {
	if c := g.running.Load(); c != nil {
		return c.FlowStates()
	}
	return nil
}

// delivererOwner names this process in the outbox's leases.
func delivererOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:deliverer", host, os.Getpid())
}

// stop stops the workers gracefully (see stopClient) and the deliverer;
// notifications it had claimed are delivered by the next one.
func (g *workerGroup) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopDel != nil {
		g.stopDel()
		<-g.delDone
		g.stopDel, g.delDone = nil, nil
	}
	if g.client != nil {
		g.running.Store(nil)
		stopClient(g.client, g.logger)
		g.client = nil
	}
}

// reload loads the files of args again and, when all of them load, replaces
// the workers; otherwise it keeps the running ones and logs why.
func (g *workerGroup) reload(args []string) {
	set, err := loadPipelineSet(args)
	if err != nil {
		g.logger.Error("redrive serve: reload failed; the previous pipelines keep running", "err", err)
		return
	}
	g.mu.Lock()
	old := g.current
	g.mu.Unlock()
	g.stop()
	if err := g.start(set); err != nil {
		g.logger.Error("redrive serve: reload failed; restarting the previous pipelines", "err", err)
		if err := g.start(old); err != nil {
			g.logger.Error("redrive serve: restarting the previous pipelines failed; no workers are running", "err", err)
		}
		return
	}
	g.logger.Info("redrive serve reloaded pipelines", "pipelines", set.names())
}
