// Package web serves redrive's JSON API and a small web UI over a
// redrive.Store.
//
//	h := web.NewHandler(store, web.Options{Token: os.Getenv("REDRIVE_API_TOKEN")})
//	err := web.Serve(ctx, "127.0.0.1:8080", h)
//
// Read endpoints (GET) are open: bind to loopback, or put the server
// behind a proxy that authenticates, when the data is sensitive. Write
// endpoints (POST) need "Authorization: Bearer <token>" and are disabled
// (403) when no token is configured. See docs/api.md for every endpoint.
package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/redrive/redrive"
)

// Defaults of Options.
const (
	// DefaultMaxBodyBytes bounds request bodies.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxPageSize is the largest limit a list accepts.
	DefaultMaxPageSize = 500
	// DefaultPageSize is the limit of a list that names none.
	DefaultPageSize = 50
	// DefaultReadyTimeout bounds the readiness check.
	DefaultReadyTimeout = 2 * time.Second
	// DefaultCancelReason is the reason recorded on items canceled by
	// POST /api/v1/runs/{id}/cancel without a reason.
	DefaultCancelReason = "canceled by an operator via the API"
)

// Options configure the handler. Zero values take the stated defaults.
type Options struct {
	// Token is the bearer token the write endpoints require, compared in
	// constant time. Default empty: the write endpoints answer 403.
	Token string
	// MaxBodyBytes bounds request bodies; larger ones get 413.
	// Default 1 MiB.
	MaxBodyBytes int64
	// MaxPageSize is the largest limit a list accepts; larger ones get 400.
	// Default 500.
	MaxPageSize int
	// DefaultPageSize is the limit of a list request that names none.
	// Default 50 (at most MaxPageSize).
	DefaultPageSize int
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
	if o.MaxPageSize <= 0 {
		o.MaxPageSize = DefaultMaxPageSize
	}
	if o.DefaultPageSize <= 0 {
		o.DefaultPageSize = DefaultPageSize
	}
	o.DefaultPageSize = min(o.DefaultPageSize, o.MaxPageSize)
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
	store     redrive.Store
	opts      Options
	tokenHash [sha256.Size]byte
}

// NewHandler returns the handler of the JSON API, the health endpoints,
// /metrics (when Options.Metrics is set) and the web UI at /.
func NewHandler(store redrive.Store, opts Options) http.Handler {
	s := &server{store: store, opts: opts.withDefaults(store)}
	if s.opts.Token != "" {
		s.tokenHash = sha256.Sum256([]byte(s.opts.Token))
	}
	mux := http.NewServeMux()
	handle := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, h)
		// The same path with any other method: 405 in JSON.
		if _, path, ok := strings.Cut(pattern, " "); ok {
			mux.Handle(path, methodNotAllowed(pattern[:strings.IndexByte(pattern, ' ')]))
		}
	}
	handle("GET /healthz", s.healthz)
	handle("GET /readyz", s.readyz)
	if s.opts.Metrics != nil {
		mux.Handle("GET /metrics", s.opts.Metrics)
	}
	handle("GET /api/v1/runs", s.listRuns)
	handle("GET /api/v1/runs/{id}", s.getRun)
	handle("POST /api/v1/runs/{id}/cancel", s.auth(s.cancelRun))
	handle("GET /api/v1/items", s.listItems)
	handle("GET /api/v1/items/{id}", s.getItem)
	handle("GET /api/v1/dlq", s.listDLQ)
	handle("GET /api/v1/dlq/export", s.exportDLQ)
	handle("POST /api/v1/dlq/redrive", s.auth(s.redrive))
	handle("POST /api/v1/dlq/purge", s.auth(s.purge))
	handle("GET /api/v1/stats", s.stats)

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

// auth guards a write endpoint with the bearer token.
func (s *server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Token == "" {
			writeError(w, http.StatusForbidden, "", "write endpoints are disabled: no API token is configured on the server")
			return
		}
		scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrive"`)
			writeError(w, http.StatusUnauthorized, "", "missing bearer token: send Authorization: Bearer <token>")
			return
		}
		// Hashing first makes the comparison constant-time in the
		// token's length too.
		got := sha256.Sum256([]byte(strings.TrimSpace(token)))
		if subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrive", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "", "invalid bearer token")
			return
		}
		h(w, r)
	}
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

// logRequests logs method, path (without the query), status, size and
// duration. Headers, and so the token, are never logged.
func (s *server) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		level := slog.LevelInfo
		if sw.status >= 500 {
			level = slog.LevelError
		}
		s.opts.Logger.LogAttrs(r.Context(), level, "http request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", sw.status), slog.Int64("bytes", sw.bytes),
			slog.Duration("duration", time.Since(start)))
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
	writeError(w, code, "", err.Error())
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
