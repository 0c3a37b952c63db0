package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/metrics"
	"github.com/redrive/redrive/web"
)

// engineMetrics returns the engine's collectors over s, with the Go and
// process collectors, and the /metrics handler that serves them.
func engineMetrics(s redrive.Store) (*metrics.Metrics, http.Handler, error) {
	return engineMetricsWith(s, metrics.Options{})
}

// engineMetricsWith is engineMetrics with options (serve's alert
// thresholds).
func engineMetricsWith(s redrive.Store, opts metrics.Options) (*metrics.Metrics, http.Handler, error) {
	m := metrics.New(s, opts)
	reg := prometheus.NewRegistry()
	for _, err := range []error{
		m.Register(reg),
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
	} {
		if err != nil {
			return nil, nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}), nil
}

// serveMetrics listens on addr and serves h at /metrics until ctx ends.
// It returns once listening, so that a bad address fails the command
// before any work starts.
func serveMetrics(ctx context.Context, addr string, h http.Handler, logger *slog.Logger) (stopped <-chan struct{}, err error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, flagErrorf("metrics-addr", "listen on %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := web.ServeListener(ctx, ln, mux); err != nil {
			logger.Error("redrive: metrics server", "err", err)
		}
	}()
	logger.Info("redrive: serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return done, nil
}
