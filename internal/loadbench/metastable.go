package loadbench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/retry/retryhttp"
)

// MetaOptions configure Metastable, a metastable failure after Bronson et al. (HotOS 2021):
// a server with a capacity and a queue, clients with timeouts that retry, and a spike of
// load above capacity. Zero values take the stated defaults.
type MetaOptions struct {
	// Slots and Service make the server's capacity, Slots / Service requests per second.
	// Defaults 4 and 40 ms: 100 requests/s.
	Slots   int
	Service time.Duration
	// Queue is how many requests wait for a slot before the server answers 503 at once.
	// Default 300 (3 s of work).
	Queue int
	// Base and Spike are the logical requests per second before and after the spike and
	// during it. Defaults 60 and 200.
	Base, Spike float64
	// SpikeAt and SpikeFor place the spike. Defaults 3 s and 2 s.
	SpikeAt, SpikeFor time.Duration
	// Duration is how long logical requests are issued. Default 30 s.
	Duration time.Duration
	// Timeout bounds each call of a client. Default 1 s.
	Timeout time.Duration
	// Log receives a line as each variant ends. Default nil: none.
	Log io.Writer
}

func (o MetaOptions) withDefaults() MetaOptions {
	if o.Slots <= 0 {
		o.Slots = 4
	}
	if o.Service <= 0 {
		o.Service = 40 * time.Millisecond
	}
	if o.Queue <= 0 {
		o.Queue = 300
	}
	if o.Base <= 0 {
		o.Base = 60
	}
	if o.Spike <= 0 {
		o.Spike = 200
	}
	if o.SpikeAt <= 0 {
		o.SpikeAt = 3 * time.Second
	}
	if o.SpikeFor <= 0 {
		o.SpikeFor = 2 * time.Second
	}
	if o.Duration <= 0 {
		o.Duration = 30 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

// MetaResult is what one client measured in the metastability scenario.
type MetaResult struct {
	// Name names the client.
	Name string
	// Requests counts logical requests and Calls the calls the server received.
	Requests, Calls int
	// Before is the share of logical requests issued before the spike that succeeded;
	// After the share of those issued in the last 8 s.
	Before, After float64
	// PerSecond is the share of each second's logical requests that succeeded.
	PerSecond []float64
}

// Recovered reports whether at least 90 % of the last 8 s's logical requests succeeded.
func (r MetaResult) Recovered() bool { return r.After >= 0.9 }

// queueServer serves Slots requests at a time, each for Service, with Queue more waiting;
// it does the work of a request whose client gave up, as a server that cannot tell does.
type queueServer struct {
	slots   chan struct{}
	waiting atomic.Int64
	queue   int64
	service time.Duration
	calls   atomic.Int64
}

func (s *queueServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	if s.waiting.Add(1) > s.queue+int64(cap(s.slots)) {
		s.waiting.Add(-1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	s.slots <- struct{}{}
	time.Sleep(s.service) // the work, done whether or not the client still waits
	<-s.slots
	s.waiting.Add(-1)
	w.WriteHeader(http.StatusOK)
}

// metaClients are the clients compared: retry.Do at its zero Policy, and with one Budget at
// its defaults shared by all requests; each call has the scenario's timeout.
var metaClients = []struct {
	name   string
	policy func() retry.Policy
}{
	{"retry.Do, zero Policy", func() retry.Policy { return retry.Policy{} }},
	{"retry.Do, shared default Budget", func() retry.Policy { return retry.Policy{Budget: retry.NewBudget(retry.BudgetOptions{})} }},
	{"no retries (MaxAttempts 1)", func() retry.Policy { return retry.Policy{MaxAttempts: 1} }},
}

// Metastable runs the scenario with each client against a fresh server.
func Metastable(ctx context.Context, o MetaOptions) ([]MetaResult, error) {
	o = o.withDefaults()
	var out []MetaResult
	for _, c := range metaClients {
		r, err := metastable(ctx, o, c.name, c.policy())
		if err != nil {
			return out, fmt.Errorf("loadbench: metastable %s: %w", c.name, err)
		}
		fmt.Fprintf(o.Log, "%s: metastable, %s: %.0f %% before, %.0f %% after\n", time.Now().UTC().Format("15:04:05"), r.Name, 100*r.Before, 100*r.After)
		out = append(out, r)
	}
	return out, nil
}

func metastable(ctx context.Context, o MetaOptions, name string, p retry.Policy) (MetaResult, error) {
	qs := &queueServer{slots: make(chan struct{}, o.Slots), queue: int64(o.Queue), service: o.Service}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return MetaResult{}, err
	}
	srv := &http.Server{Handler: qs, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	hc := &http.Client{Transport: pooled(256)}
	defer hc.CloseIdleConnections()
	seconds := int((o.Duration + time.Second - 1) / time.Second)
	issued := make([]atomic.Int64, seconds)
	ok := make([]atomic.Int64, seconds)
	start := time.Now()
	var wg sync.WaitGroup
	at := time.Duration(0)
	for at < o.Duration {
		if d := time.Until(start.Add(at)); d > 0 && !wait(ctx, d) {
			break
		}
		sec := int(at / time.Second)
		issued[sec].Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := retry.Do(ctx, p, func(ctx context.Context) error {
				actx, cancel := context.WithTimeout(ctx, o.Timeout)
				defer cancel()
				req, err := http.NewRequestWithContext(actx, http.MethodGet, url, nil)
				if err != nil {
					return retry.Final(err)
				}
				resp, err := hc.Do(req)
				if err != nil {
					return retry.Retryable(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return retryhttp.StatusError(resp)
			})
			if err == nil {
				ok[sec].Add(1)
			}
		}()
		rate := o.Base
		if at >= o.SpikeAt && at < o.SpikeAt+o.SpikeFor {
			rate = o.Spike
		}
		at += time.Duration(float64(time.Second) / rate)
	}
	wg.Wait()
	r := MetaResult{Name: name, Calls: int(qs.calls.Load())}
	share := func(from, to int) float64 {
		var n, s int64
		for i := max(from, 0); i < min(to, seconds); i++ {
			n += issued[i].Load()
			s += ok[i].Load()
		}
		if n == 0 {
			return 0
		}
		return float64(s) / float64(n)
	}
	for i := range seconds {
		r.Requests += int(issued[i].Load())
		r.PerSecond = append(r.PerSecond, share(i, i+1))
	}
	r.Before = share(0, int(o.SpikeAt/time.Second))
	r.After = share(seconds-8, seconds)
	return r, nil
}
