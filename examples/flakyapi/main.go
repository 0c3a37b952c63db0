// Command flakyapi serves a fake model endpoint that fails on purpose, for
// demos and tests of retry policies: POST /v1/complete takes
// {"prompt": "..."} and answers {"completion": "..."}, except that, at the
// configured rates, it answers 429 with Retry-After, 500, too slowly, or
// with malformed JSON, and, with --limit, answers 429 to requests over a
// real rate limit (a token bucket). The random answers are deterministic
// given --seed.
//
//	flakyapi --addr 127.0.0.1:8089 --limit 100 --rate-429 0.1 --rate-500 0.05 --seed 7
//
// With --addr-file it writes the address it listens on (useful with port 0)
// to that file once it accepts connections.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redrive/redrive/examples/flakyapi/flaky"
)

func main() {
	var o flaky.Options
	addr := flag.String("addr", "127.0.0.1:8089", "address to listen on (port 0 picks a free port)")
	addrFile := flag.String("addr-file", "", "write the listening address to this file once ready")
	flag.Float64Var(&o.Rate429, "rate-429", 0.10, "share of requests answered 429 with Retry-After")
	flag.Float64Var(&o.Rate500, "rate-500", 0.05, "share of requests answered 500")
	flag.Float64Var(&o.RateSlow, "rate-slow", 0.02, "share of requests answered only after --slow")
	flag.Float64Var(&o.RateMalformed, "rate-malformed", 0.01, "share of requests answered with malformed JSON")
	flag.DurationVar(&o.RetryAfter, "retry-after", time.Second, "wait announced by 429 answers (whole seconds)")
	flag.DurationVar(&o.Slow, "slow", 5*time.Second, "how long slow answers take")
	flag.Uint64Var(&o.Seed, "seed", 1, "seed of the deterministic failures")
	flag.Float64Var(&o.Limit, "limit", 0, "requests per second accepted (a token bucket; over it: 429 with Retry-After); 0 means no limit")
	flag.IntVar(&o.Burst, "burst", 0, "the token bucket's size (default: --limit)")
	flag.Parse()
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "flakyapi:", err)
		os.Exit(2)
	}
	if err := serve(*addr, *addrFile, o); err != nil {
		log.Fatalf("flakyapi: %v", err)
	}
}

func serve(addr, addrFile string, o flaky.Options) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if addrFile != "" {
		if err := os.WriteFile(addrFile, []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
			return fmt.Errorf("write address file: %w", err)
		}
	}
	log.Printf("flakyapi: listening on http://%s (limit %g/s, 429 %.0f%%, 500 %.0f%%, slow %.0f%%, malformed %.0f%%, seed %d)",
		ln.Addr(), o.Limit, o.Rate429*100, o.Rate500*100, o.RateSlow*100, o.RateMalformed*100, o.Seed)
	srv := &http.Server{Handler: flaky.NewHandler(o), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
