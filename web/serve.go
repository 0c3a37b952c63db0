package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DefaultAddr is the address Serve listens on when given none: loopback
// only, so that the API is not exposed by accident.
const DefaultAddr = "127.0.0.1:8080"

// Timeouts of the server Serve runs.
const (
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout bounds reading a whole request.
	ReadTimeout = 30 * time.Second
	// WriteTimeout bounds writing a response (exports of large
	// dead-letter queues included).
	WriteTimeout = 5 * time.Minute
	// IdleTimeout bounds keep-alive connections.
	IdleTimeout = 2 * time.Minute
	// ShutdownTimeout bounds the graceful shutdown once ctx ends.
	ShutdownTimeout = 10 * time.Second
	// MaxHeaderBytes bounds request headers.
	MaxHeaderBytes = 64 << 10
)

// Serve listens on addr (default DefaultAddr, "127.0.0.1:8080") and serves
// h until ctx ends; it then shuts down gracefully, letting requests in
// flight finish for up to ShutdownTimeout, and returns nil.
func Serve(ctx context.Context, addr string, h http.Handler) error {
	if addr == "" {
		addr = DefaultAddr
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("web: listen: %w", err)
	}
	return ServeListener(ctx, ln, h)
}

// ServeListener is Serve on a listener the caller opened (for example on
// port 0 in tests). It closes ln.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler) error {
	// Requests that wait (GET /api/v1/runs/{id}?wait=) answer at once
	// when the shutdown starts, rather than hold it up.
	stopping := make(chan struct{})
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.WithoutCancel(ctx), shutdownKey{}, (<-chan struct{})(stopping))
		},
	}
	srv.RegisterOnShutdown(func() { close(stopping) })
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("web: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("web: shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("web: serve: %w", err)
	}
	return nil
}

// shutdownKey is the context key of the channel that closes when the
// server starts shutting down.
type shutdownKey struct{}

// shuttingDown returns a channel closed when the server that received the
// request starts its shutdown, or nil (never ready) outside ServeListener.
func shuttingDown(ctx context.Context) <-chan struct{} {
	c, _ := ctx.Value(shutdownKey{}).(<-chan struct{})
	return c
}
