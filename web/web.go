// Package web serves redrive's JSON API and a small web UI over a
// redrive.Store.
//
//	h := web.NewHandler(store, web.Options{Token: os.Getenv("REDRIVE_API_TOKEN")})
//	err := web.Serve(ctx, "127.0.0.1:8080", h)
//
// Every endpoint needs a scope (see Scope): read, submit, admin or work. Tokens
// are sent as "Authorization: Bearer <token>". Read endpoints are open
// until a token with the read scope is configured: bind to loopback, or
// configure one, when the data is sensitive. Submit and admin endpoints are
// disabled (403) until a token with their scope is configured. See
// docs/api.md for every endpoint and docs/openapi.yaml for its schema.
package web

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redrive/redrive"
)

// Defaults of Options.
const (
	// DefaultMaxBodyBytes bounds request bodies.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxSubmitBytes bounds the bodies of the submit endpoints.
	DefaultMaxSubmitBytes = 8 << 20
	// DefaultMaxBatchItems is the most items one submit request carries.
	DefaultMaxBatchItems = 1000
	// DefaultMaxPageSize is the largest limit a list accepts.
	DefaultMaxPageSize = 500
	// DefaultPageSize is the limit of a list that names none.
	DefaultPageSize = 50
	// DefaultReadyTimeout bounds the readiness check.
	DefaultReadyTimeout = 2 * time.Second
	// DefaultMaxWait caps the wait of GET /api/v1/runs/{id}?wait=.
	DefaultMaxWait = 60 * time.Second
	// DefaultWaitPollInterval is how often a waiting request reads the run.
	DefaultWaitPollInterval = 500 * time.Millisecond
	// DefaultCancelReason is the reason recorded on items canceled by
	// POST /api/v1/runs/{id}/cancel without a reason.
	DefaultCancelReason = "canceled by an operator via the API"
)

// Options configure the handler. Zero values take the stated defaults.
type Options struct {
	// Token is a bearer token with the submit and admin scopes, compared
	// in constant time (kept from before scoped tokens). Default empty.
	Token string
	// Tokens are named bearer tokens with their scopes; several may grant
	// the same scope (rotation). With neither Token nor Tokens, submit and
	// admin endpoints answer 403 and reads are open. Default none.
	Tokens []Token
	// ActorHeader names a request header that an authenticating reverse
	// proxy sets to the person it let through (oauth2-proxy's
	// X-Forwarded-User or X-Forwarded-Email, an ingress's
	// X-Auth-Request-User). When set, the audit log records that person
	// as the actor of the request's actions, and the request log names
	// them; a request without the header is recorded under its token's
	// name. The header names the actor only: every endpoint still needs a
	// token with its scope. Trusting it is safe only when the proxy strips
	// any copy a client sends and nothing reaches the server except
	// through the proxy (bind to loopback, or a network only the proxy
	// reaches): otherwise anyone with a token can act under any name.
	// Default "": the actor is the token's name.
	ActorHeader string
	// Pipelines are the pipelines the submit endpoints accept items for;
	// others get 404. Default none: every submit answers 404.
	Pipelines []PipelineRef
	// CallbackSigned reports whether a secret signs the callbacks of a
	// pipeline's items (its webhook's, or a callback secret): an item
	// submitted with a callback for a pipeline it rejects gets 400, since
	// its receiver could not tell redrive from anyone else. Default nil:
	// no pipeline accepts callbacks.
	CallbackSigned func(pipeline string) bool
	// MaxBodyBytes bounds request bodies; larger ones get 413.
	// Default 1 MiB.
	MaxBodyBytes int64
	// MaxSubmitBytes bounds the bodies of the submit endpoints, which
	// carry batches of items; larger ones get 413. Default 8 MiB.
	MaxSubmitBytes int64
	// MaxBatchItems is the most items one submit request may carry; more
	// get 400. Default 1000.
	MaxBatchItems int
	// MaxPageSize is the largest limit a list accepts; larger ones get 400.
	// Default 500.
	MaxPageSize int
	// DefaultPageSize is the limit of a list request that names none.
	// Default 50 (at most MaxPageSize).
	DefaultPageSize int
	// MaxWait caps the wait of GET /api/v1/runs/{id}?wait=; longer waits
	// are cut to it. Keep it under the server's WriteTimeout and any proxy's
	// idle timeout. Default 60 s.
	MaxWait time.Duration
	// WaitPollInterval is how often a waiting request reads its run: one
	// short query each time, no connection held in between. A run's end is
	// answered at most this late. Default 500 ms.
	WaitPollInterval time.Duration
	// Work returns the started client whose External stages workers lease
	// over POST /api/v1/leases (docs/workers.md), or nil while none runs;
	// it is asked at every request, so that a reload may replace the
	// client. Default nil: those endpoints answer 503.
	Work func() *redrive.Client
	// Metrics, when set, is mounted at GET /metrics (for example
	// promhttp.HandlerFor(registry, promhttp.HandlerOpts{})).
	// Default nil: no /metrics route.
	Metrics http.Handler
	// Ready reports whether the server can serve, for GET /readyz.
	// Default: a cheap store query (list one run).
	Ready func(ctx context.Context) error
	// ReadyTimeout bounds one readiness check. Default 2 s.
	ReadyTimeout time.Duration
	// Observers receive the events of the API's actions (a Redriven event
	// after a redrive), like redrive.Config.Observers: pass the metrics
	// observer so that redrives through the API are counted. Default none.
	Observers []func(redrive.Event)
	// Logger receives one line per request (never the token) and errors.
	// Default: none.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (o Options) withDefaults(store redrive.Store) Options {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxSubmitBytes <= 0 {
		o.MaxSubmitBytes = DefaultMaxSubmitBytes
	}
	if o.MaxBatchItems <= 0 {
		o.MaxBatchItems = DefaultMaxBatchItems
	}
	if o.MaxPageSize <= 0 {
		o.MaxPageSize = DefaultMaxPageSize
	}
	if o.DefaultPageSize <= 0 {
		o.DefaultPageSize = DefaultPageSize
	}
	o.DefaultPageSize = min(o.DefaultPageSize, o.MaxPageSize)
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.WaitPollInterval <= 0 {
		o.WaitPollInterval = DefaultWaitPollInterval
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.Ready == nil {
		o.Ready = func(ctx context.Context) error {
			_, err := store.ListRuns(ctx, redrive.RunFilter{Limit: 1})
			return err
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

//go:embed ui
var uiFiles embed.FS

type server struct {
	store redrive.Store
	opts  Options
	creds []credential
}

// route is one endpoint: its method and path pattern and the scope it
// needs.
type route struct {
	pattern string
	scope   Scope
	h       http.HandlerFunc
}

// routes lists the API's endpoints (the health and metrics endpoints and
// the UI are served beside them).
func (s *server) routes() []route {
	return []route{
		{"GET /api/v1/runs", ScopeRead, s.listRuns},
		{"POST /api/v1/runs", ScopeSubmit, s.createRun},
		{"GET /api/v1/runs/{id}", ScopeRead, s.getRun},
		{"GET /api/v1/runs/{id}/items.ndjson", ScopeRead, s.runItemsNDJSON},
		{"POST /api/v1/runs/{id}/items", ScopeSubmit, s.addRunItems},
		{"POST /api/v1/runs/{id}/cancel", ScopeAdmin, s.cancelRun},
		{"GET /api/v1/pipelines", ScopeRead, s.listPipelines},
		{"POST /api/v1/pipelines/{name}/items", ScopeSubmit, s.addPipelineItems},
		{"GET /api/v1/items", ScopeRead, s.listItems},
		{"GET /api/v1/items/{id}", ScopeRead, s.getItem},
		{"POST /api/v1/items/{id}/cancel", ScopeAdmin, s.cancelItem},
		{"GET /api/v1/dlq", ScopeRead, s.listDLQ},
		{"GET /api/v1/dlq/export", ScopeRead, s.exportDLQ},
		{"POST /api/v1/dlq/redrive", ScopeAdmin, s.redrive},
		{"POST /api/v1/dlq/purge", ScopeAdmin, s.purge},
		{"GET /api/v1/stats", ScopeRead, s.stats},
		{"GET /api/v1/outbox", ScopeRead, s.listOutbox},
		{"POST /api/v1/outbox/redrive", ScopeAdmin, s.redriveOutbox},
	}
}

// NewHandler returns the handler of the JSON API, the health endpoints,
// /metrics (when Options.Metrics is set) and the web UI at /.
func NewHandler(store redrive.Store, opts Options) http.Handler {
	s := &server{store: store, opts: opts.withDefaults(store), creds: credentials(opts)}
	mux := http.NewServeMux()
	// Each path answers other methods with 405 in JSON, naming the ones
	// it serves.
	allow := map[string][]string{}
	var paths []string
	handle := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, h)
		method, path, _ := strings.Cut(pattern, " ")
		if allow[path] == nil {
			paths = append(paths, path)
		}
		allow[path] = append(allow[path], method)
	}
	handle("GET /healthz", s.healthz)
	handle("GET /api/v1/whoami", s.whoami)
	handle("GET /readyz", s.readyz)
	if s.opts.Metrics != nil {
		mux.Handle("GET /metrics", s.opts.Metrics)
	}
	for _, rt := range append(append(append(s.routes(), s.consoleRoutes()...), s.pendingRoutes()...), s.leaseRoutes()...) {
		handle(rt.pattern, s.require(rt.scope, rt.h))
	}
	// One pattern per method rather than one for the whole path: a path
	// such as /api/v1/items/cancel would otherwise conflict with
	// GET /api/v1/items/{id}.
	for _, p := range paths {
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"} {
			if slices.Contains(allow[p], m) || (m == "HEAD" && slices.Contains(allow[p], "GET")) {
				continue
			}
			mux.Handle(m+" "+p, methodNotAllowed(strings.Join(allow[p], ", ")))
		}
	}

	static, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux.Handle("GET /{$}", uiPage(static))
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "", "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return s.logRequests(secureHeaders(mux))
}

// uiPage serves the UI's single page with a strict content security
// policy: scripts and styles from this server only.
func uiPage(static fs.FS) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, static, "index.html")
	})
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "", "method "+r.Method+" not allowed; use "+allow)
	}
}

func secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// statusWriter remembers the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logRequests logs method, path (without the query), status, size,
// duration, the name of the token used and, with Options.ActorHeader, the
// person it names. Other headers, and so the secret, are never logged.
func (s *server) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		var tokenName string
		r = r.WithContext(context.WithValue(r.Context(), tokenNameKey{}, &tokenName))
		h.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		level := slog.LevelInfo
		if sw.status >= 500 {
			level = slog.LevelError
		}
		attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", sw.status), slog.Int64("bytes", sw.bytes),
			slog.Duration("duration", time.Since(start)), slog.String("token", tokenName)}
		if p, err := s.proxyActor(r); err == nil && p != "" {
			attrs = append(attrs, slog.String("actor", p))
		}
		s.opts.Logger.LogAttrs(r.Context(), level, "http request", attrs...)
	})
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.ReadyTimeout)
	defer cancel()
	if err := s.opts.Ready(ctx); err != nil {
		s.opts.Logger.Warn("web: not ready", "error", err)
		writeError(w, http.StatusServiceUnavailable, "", "not ready: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// errStatus maps a store or engine error to a status code.
func errStatus(err error) int {
	switch {
	case errors.Is(err, redrive.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, redrive.ErrBadFilter):
		return http.StatusBadRequest
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return 499 // the client went away; nobody reads this
	}
	return http.StatusInternalServerError
}

// fail writes err with the status it maps to; 5xx errors are logged and
// answered with a generic message.
func (s *server) fail(w http.ResponseWriter, r *http.Request, op string, err error) {
	code := errStatus(err)
	if code >= 500 {
		s.opts.Logger.Error("web: "+op, "path", r.URL.Path, "error", err)
		writeError(w, code, "", op+" failed: internal error")
		return
	}
	if code == http.StatusNotFound {
		// The store's message ("sqlite: get run 42: redrive: not found")
		// names its internals; say what does not exist.
		writeError(w, code, "", notFoundMessage(op, r))
		return
	}
	var fe *redrive.FilterError
	if errors.As(err, &fe) {
		writeError(w, code, fe.Field, fe.Msg)
		return
	}
	writeError(w, code, "", userMessage(err))
}

// notFoundMessage says which run or item of the request does not exist.
func notFoundMessage(op string, r *http.Request) string {
	what := "run"
	if strings.HasSuffix(op, "item") {
		what = "item"
	}
	if id := r.PathValue("id"); id != "" {
		return what + " " + id + " does not exist"
	}
	if id := r.URL.Query().Get("run"); id != "" {
		return "run " + id + " does not exist"
	}
	return what + " does not exist"
}
