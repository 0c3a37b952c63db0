package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/runner"
	"github.com/redrive/redrive/web"
	"github.com/spf13/cobra"
)

// envAPIToken names the environment variable that holds the API token when
// --token is not given.
const envAPIToken = "REDRIVE_API_TOKEN"

// envAPITokens names the environment variable that holds scoped tokens, in
// the format of --token-file (lines, or entries separated by ";").
const envAPITokens = "REDRIVE_API_TOKENS"

// serveStopGrace is how long running attempts of --pipeline workers get to
// finish once serve is interrupted; unfinished ones return to pending.
const serveStopGrace = 30 * time.Second

// newServeCmd returns `redrive serve`.
func newServeCmd() *cobra.Command {
	var (
		addr            string
		token           string
		tokenFile       string
		accept          []string
		migrate         bool
		pipelines       []string
		pipelineDirs    []string
		workers         int
		lease           time.Duration
		callbackFile    string
		callbackPrivate bool
		publicURL       string
		actorHeader     string
		otlpEndpoint    string
		alerts          alertFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve /metrics, /healthz, /readyz, the JSON API and the web UI",
		Long: `Serve an HTTP server with Prometheus metrics at /metrics, liveness at /healthz,
readiness (the database answers) at /readyz, the JSON API under /api/v1/ and
the web UI at /, until interrupted (SIGINT or SIGTERM), then shut down
gracefully and exit 0.

Every endpoint needs a scope: read, submit (create runs, add items), admin
(cancel, redrive, purge) or work (external workers lease items), granted by tokens sent as "Authorization: Bearer
TOKEN". Tokens come from --token-file FILE and the REDRIVE_API_TOKENS
environment variable, one per line (or ";"-separated in the variable) as
"name scope[,scope] token"; several may grant a scope, to rotate them. The
single --token (or REDRIVE_API_TOKEN) is a submit and admin token. Submit
and admin endpoints answer 403 until a token grants their scope; reads are
open until a token grants the read scope. Secrets are never logged; token
names are.

Items are accepted for the pipelines of --pipeline files and for those
named with --accept NAME:FIRST_STAGE (worked by other processes).

An item submitted with a callback URL is told of its end there, signed
like a webhook: with its pipeline's webhook secret, else with the secret
of --callback-secret-file (or REDRIVE_CALLBACK_SECRET). An item with a
callback that no secret would sign is refused with 400.

With --pipelines DIR_OR_FILES (or --pipeline FILE.yaml; both repeatable; a
directory gives its *.yaml and *.yml files, a quoted glob its matches) serve
also runs workers for those YAML pipelines (the format of ` + "`redrive run`" + `)
until stopped: items submitted over the API, by redrive enqueue or redriven
are worked, and several serve processes on one PostgreSQL database share
the work. A pipeline file's webhook: section sends its notifications
(docs/webhooks.md). SIGHUP reloads the files: when all of them load, the
workers stop gracefully and start again with the new configuration; when
one does not, the error is logged and the old configuration keeps running.
On interrupt the workers stop claiming, let running attempts finish for up
to 30s and return the rest to pending. A stage written "external: true" is
worked by long-running workers in any language, which lease its items at
POST /api/v1/leases with a work token (docs/workers.md). Pipelines written in Go run in the host program that registers
them with a redrive.Client (see docs/cli.md for serving from such a program).`,
		Example: `  redrive serve --db sqlite:redrive.db --addr 127.0.0.1:8080
  redrive serve --db sqlite:redrive.db --pipeline ocr.yaml --workers 8
  redrive serve --db postgres://app@db/app --pipelines pipelines/ --addr 127.0.0.1:8080
  REDRIVE_API_TOKEN=s3cret redrive serve --db postgres://app@db/app --addr :8080
  redrive serve --token-file /etc/redrive/tokens --pipeline ocr.yaml --log-format json`,
		Args: noArgs,
	}
	cmd.Flags().StringVar(&addr, "addr", web.DefaultAddr, "address to listen on (host:port; port 0 picks a free port)")
	cmd.Flags().StringVar(&token, "token", "", "bearer token for the API's write endpoints (env "+envAPIToken+"; prefer the environment, flags show in ps)")
	cmd.Flags().BoolVar(&migrate, "migrate", false, "apply pending PostgreSQL migrations before serving, and create a SQLite file that does not exist (SQLite always migrates)")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", `file of scoped API tokens, lines "name scope[,scope] token" (scopes: read, submit, admin, work; env `+envAPITokens+` too)`)
	cmd.Flags().StringArrayVar(&accept, "accept", nil, "accept submitted items for a pipeline worked elsewhere, as NAME:FIRST_STAGE (repeatable)")
	cmd.Flags().StringArrayVar(&pipelines, "pipeline", nil, "also run workers for the YAML pipeline in this file (repeatable)")
	cmd.Flags().StringArrayVar(&pipelineDirs, "pipelines", nil, "also run workers for the YAML pipelines of this directory, glob or file (repeatable); SIGHUP reloads them")
	cmd.Flags().IntVar(&workers, "workers", 0, "attempts running at once for --pipeline workers (default: the largest workers: of the files, else 16)")
	cmd.Flags().DurationVar(&lease, "lease", 30*time.Second, "how long items and notifications claimed by a worker stay its own without a heartbeat: another worker takes over a crashed one's after this long")
	cmd.Flags().BoolVar(&callbackPrivate, "callback-allow-private", false, "let item callbacks reach loopback, private and link-local addresses (by default only public addresses: a callback URL comes from whoever submits the item)")
	cmd.Flags().StringVar(&publicURL, "public-url", "", "the URL receivers reach this API at (e.g. https://redrive.example.com): an item.succeeded notification whose output is too large to carry names the item's URL under it (default: the path /api/v1/items/ID alone)")
	cmd.Flags().StringVar(&callbackFile, "callback-secret-file", "", "file whose content signs item callbacks of pipelines without a webhook (env "+envCallbackSecret+")")
	cmd.Flags().StringVar(&actorHeader, "actor-header", "", "behind a reverse proxy that authenticates people, the request header it sets to the user (e.g. X-Forwarded-User): the audit log records that person; trust it only when the proxy strips copies clients send and serve is reachable through the proxy alone, bound to loopback (default none: the token's name)")
	cmd.Flags().StringArrayVar(&alerts.stuckAfter, "stuck-after", nil, "how long a pending item may stay due unclaimed before it counts as stuck: DURATION for every pipeline (default 15m), or PIPELINE=DURATION (repeatable; wins over the file's alerts:)")
	cmd.Flags().StringArrayVar(&alerts.warning, "dead-letters-warning", nil, "dead letters an hour of one stage above which the warning alert fires: N for every pipeline (default 10), or PIPELINE=N (repeatable)")
	cmd.Flags().StringArrayVar(&alerts.critical, "dead-letters-critical", nil, "dead letters an hour of one stage above which the critical alert fires: N for every pipeline (default 1000), or PIPELINE=N (repeatable)")
	cmd.Flags().StringVar(&otlpEndpoint, "otlp-endpoint", "", otlpFlagUsage)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if lease < time.Second {
			return flagErrorf("lease", "%s is too short: give 1s or more", lease)
		}
		if workers < 0 {
			return flagErrorf("workers", "%d is negative: give 1 or more, or 0 for the default", workers)
		}
		if addr == "" {
			return flagErrorf("addr", "empty address: give host:port, e.g. 127.0.0.1:8080")
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return flagErrorf("addr", "%q is not host:port (e.g. 127.0.0.1:8080 or :8080)", addr)
		}
		if err := checkActorHeader(actorHeader); err != nil {
			return err
		}
		thresholds, err := alerts.parse()
		if err != nil {
			return err
		}
		if !cmd.Flags().Changed("token") {
			token = os.Getenv(envAPIToken)
		}
		tokens, err := loadTokens(tokenFile)
		if err != nil {
			return err
		}
		callbackSecret, err := loadCallbackSecret(callbackFile)
		if err != nil {
			return err
		}
		if publicURL != "" {
			if u, err := url.Parse(publicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return flagErrorf("public-url", "%q is not an absolute http or https URL", publicURL)
			}
		}
		var refs []web.PipelineRef
		for _, a := range accept {
			name, stage, ok := strings.Cut(a, ":")
			if !ok || name == "" || stage == "" {
				return flagErrorf("accept", "%q is not NAME:FIRST_STAGE (e.g. summarize:fetch)", a)
			}
			refs = append(refs, web.PipelineRef{Name: name, FirstStage: stage})
		}
		ctx := cmd.Context()
		logger := newLogger(cmd, cmd.ErrOrStderr())
		tracerProvider, stopTracing, err := newTracerProvider(ctx, otlpEndpoint, logger)
		if err != nil {
			return err
		}
		// Deferred first, so run last: after the workers stopped, the last
		// attempts' spans are flushed.
		defer stopTracing()

		// Load the pipelines before touching the database, so that a bad
		// file is a usage error that changes nothing.
		pipelineArgs := append(append([]string(nil), pipelines...), pipelineDirs...)
		var set *pipelineSet
		if len(pipelineArgs) > 0 {
			var err error
			if set, err = loadPipelineSet(pipelineArgs); err != nil {
				return exitWith(exitUsage, err)
			}
		}

		c := dbConfigFrom(ctx)
		// A SQLite file that does not exist is a typo more often than a
		// wish for a new database: only --migrate creates one.
		s, closeFn, err := openStoreWith(ctx, c.URL, openOptions{Schema: c.Schema, Migrate: migrate, MustExist: !migrate})
		if err != nil {
			return err
		}
		defer closeFn()

		var fileAlerts atomic.Pointer[map[string]runner.AlertsSpec]
		m, metricsHandler, err := engineMetricsWith(s, thresholds.metricsOptions(&fileAlerts))
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		if set != nil {
			// Pipelines a reload adds are accepted for submits after a
			// restart; their workers run at once.
			refs = append(refs, web.Refs(set.pipelines...)...)
		}
		g := &workerGroup{store: s, workers: workers, lease: lease, logger: logger, observers: []func(redrive.Event){m.Observe},
			callbackSecret: callbackSecret, callbackAllowPrivate: callbackPrivate, publicURL: publicURL, alerts: &fileAlerts,
			tracerProvider: tracerProvider}
		m.TrackFlows(g.flowStates)
		h := web.NewHandler(s, web.Options{
			Token:          token,
			Tokens:         tokens,
			ActorHeader:    actorHeader,
			Pipelines:      refs,
			CallbackSigned: g.callbackSigned,
			Work:           g.running.Load,
			Metrics:        metricsHandler,
			Observers:      []func(redrive.Event){m.Observe},
			Logger:         logger,
		})

		if set != nil {
			if err := g.start(set); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			// The workers stop below, gracefully, after the server.
			defer g.stop()
			stopHUP := reloadOnHangup(ctx, func() { g.reload(pipelineArgs) })
			defer stopHUP()
		}

		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("serve: listen on %s: %w", addr, err)
		}
		logger.Info("redrive serve listening", "url", "http://"+ln.Addr().String(), "db", redactURL(c.URL),
			"tokens", tokenSummary(token, tokens), "accepts", len(refs))
		if actorHeader != "" && !loopback(ln.Addr()) {
			logger.Warn("redrive serve: --actor-header is trusted on an address other hosts reach: anyone with a token who reaches it directly can act under any name; bind to loopback behind the proxy, or make sure only the proxy reaches it and strips the header clients send",
				"header", actorHeader, "addr", ln.Addr().String())
		}
		if err := web.ServeListener(ctx, ln, h); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		logger.Info("redrive serve stopped")
		return nil
	}
	return cmd
}

// stopClient stops the workers of serve, letting running attempts finish
// for up to serveStopGrace.
func stopClient(c *redrive.Client, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), serveStopGrace)
	defer cancel()
	if err := c.Stop(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		logger.Error("redrive serve: stop workers", "err", err)
	}
}
