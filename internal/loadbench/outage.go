package loadbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/retry/retryhttp"
)

// OutageOptions configure Outage. Zero values take the stated defaults.
type OutageOptions struct {
	// Before is the healthy time before the outage. Default 3 s.
	Before time.Duration
	// Outage is how long every request is answered 503 without Retry-After. Default 10 s.
	Outage time.Duration
	// After is the stream's healthy time after the outage. Default 3 s.
	After time.Duration
	// StreamRate is the stream's logical requests per second. Default 50.
	StreamRate float64
	// Items is how many items the engine drains through the outage. Default 3000.
	Items int
	// Workers is the engine's (and the naive loop's) workers. Default 32.
	Workers int
	// Latency is how long the drained server takes per successful request, so that 32
	// workers do 160 requests/s at most. Default 200 ms.
	Latency time.Duration
	// Limit bounds one variant's time. Default 3 minutes.
	Limit time.Duration
	// Log receives a line as each variant ends. Default nil: none.
	Log io.Writer
	// Trace, when not nil, receives the engine's timeline in the drain: breaker changes,
	// attempts per second by outcome and the server's windows around the recovery.
	// Default nil: none.
	Trace io.Writer
}

func (o OutageOptions) withDefaults() OutageOptions {
	if o.Before <= 0 {
		o.Before = 3 * time.Second
	}
	if o.Outage <= 0 {
		o.Outage = 10 * time.Second
	}
	if o.After <= 0 {
		o.After = 3 * time.Second
	}
	if o.StreamRate <= 0 {
		o.StreamRate = 50
	}
	if o.Items <= 0 {
		o.Items = 3000
	}
	if o.Workers <= 0 {
		o.Workers = 32
	}
	if o.Latency <= 0 {
		o.Latency = 200 * time.Millisecond
	}
	if o.Limit <= 0 {
		o.Limit = 3 * time.Minute
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o
}

func (o OutageOptions) outage(elapsed time.Duration) bool {
	return elapsed >= o.Before && elapsed < o.Before+o.Outage
}

// StreamResult is what a steady stream of logical requests measured through an outage.
type StreamResult struct {
	// Name names the client.
	Name string
	// Requests counts logical requests; Succeeded those that got a 2xx, Failed the others.
	Requests, Succeeded, Failed int
	// OutageRequests counts the logical requests issued during the outage and OutageCalls
	// the calls the server received during it.
	OutageRequests, OutageCalls int
}

// CallsPerRequest returns the calls received during the outage per logical request issued
// during it.
func (r StreamResult) CallsPerRequest() float64 {
	return float64(r.OutageCalls) / float64(max(r.OutageRequests, 1))
}

// A streamClient makes one logical request: it reports whether it got a 2xx.
type streamClient struct {
	name string
	new  func() func(ctx context.Context, url, key string) bool
}

// pooled returns a transport that keeps an idle connection per worker.
func pooled(workers int) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = workers
	return tr
}

// get sends one GET with the key in X-Item and returns the response, its body drained and
// closed.
func get(ctx context.Context, hc *http.Client, url, key string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Item", key)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp, nil
}

// streamClients are the clients of the stream: retry.Do at its zero Policy, retry.Do with
// one Budget at its defaults shared by all requests, a zero retryhttp.Transport, and the
// naive loop.
var streamClients = []streamClient{
	{"retry.Do, zero Policy", func() func(context.Context, string, string) bool {
		hc := &http.Client{Transport: pooled(64)}
		return func(ctx context.Context, url, key string) bool {
			return retry.Do(ctx, retry.Policy{}, func(ctx context.Context) error {
				resp, err := get(ctx, hc, url, key)
				if err != nil {
					return err
				}
				return retryhttp.StatusError(resp)
			}) == nil
		}
	}},
	{"retry.Do, shared default Budget", func() func(context.Context, string, string) bool {
		hc := &http.Client{Transport: pooled(64)}
		p := retry.Policy{Budget: retry.NewBudget(retry.BudgetOptions{})}
		return func(ctx context.Context, url, key string) bool {
			return retry.Do(ctx, p, func(ctx context.Context) error {
				resp, err := get(ctx, hc, url, key)
				if err != nil {
					return err
				}
				return retryhttp.StatusError(resp)
			}) == nil
		}
	}},
	{"retryhttp.Transport, zero value", func() func(context.Context, string, string) bool {
		hc := &http.Client{Transport: &retryhttp.Transport{}}
		return func(ctx context.Context, url, key string) bool {
			resp, err := get(ctx, hc, url, key)
			return err == nil && resp.StatusCode < 300
		}
	}},
	{"naive loop (100 ms)", func() func(context.Context, string, string) bool {
		hc := &http.Client{Transport: pooled(64)}
		return func(ctx context.Context, url, key string) bool {
			for ctx.Err() == nil {
				if resp, err := get(ctx, hc, url, key); err == nil && resp.StatusCode < 300 {
					return true
				}
				wait(ctx, NaiveDelay)
			}
			return false
		}
	}},
}

// Stream sends a steady stream of logical requests through an outage with each client, and
// counts the calls the server received during it per logical request issued during it.
func Stream(ctx context.Context, o OutageOptions) ([]StreamResult, error) {
	o = o.withDefaults()
	var out []StreamResult
	for _, c := range streamClients {
		r, err := stream(ctx, o, c)
		if err != nil {
			return out, fmt.Errorf("loadbench: stream %s: %w", c.name, err)
		}
		fmt.Fprintf(o.Log, "%s: stream, %s: %.2f calls per logical request in the outage\n", time.Now().UTC().Format("15:04:05"), r.Name, r.CallsPerRequest())
		out = append(out, r)
	}
	return out, nil
}

func stream(ctx context.Context, o OutageOptions, c streamClient) (StreamResult, error) {
	srv, err := StartServer(ServerOptions{Outage: o.outage})
	if err != nil {
		return StreamResult{}, err
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(ctx, o.Limit)
	defer cancel()
	call := c.new()
	r := StreamResult{Name: c.name}
	var ok atomic.Int64
	var wg sync.WaitGroup
	total := o.Before + o.Outage + o.After
	interval := time.Duration(float64(time.Second) / o.StreamRate)
	for i := 0; ; i++ {
		at := time.Duration(i) * interval
		if at >= total {
			break
		}
		if d := time.Until(srv.Rec.Start.Add(at)); d > 0 && !wait(ctx, d) {
			break
		}
		r.Requests++
		if o.outage(at) {
			r.OutageRequests++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if call(ctx, srv.URL+"/v1/get", fmt.Sprintf("s%d", i)) {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	r.Succeeded = int(ok.Load())
	r.Failed = r.Requests - r.Succeeded
	_, r.OutageCalls = srv.Rec.KeysBetween(o.Before, o.Before+o.Outage)
	return r, nil
}

// DrainResult is what draining items through an outage measured.
type DrainResult struct {
	// Name names the client.
	Name string
	// Items counts the items; Succeeded, Dead and Unfinished their ends.
	Items, Succeeded, Dead, Unfinished int
	// OutageItems counts the items called during the outage and OutageCalls the calls.
	OutageItems, OutageCalls int
	// Rate is the successful rate before the outage, per second.
	Rate float64
	// Recovery is how long after the outage the successful rate over one second was back
	// to 90 % of Rate; negative when it never was.
	Recovery time.Duration
	// Elapsed is the variant's wall time.
	Elapsed time.Duration
}

// CallsPerItem returns the calls during the outage per item called during it.
func (r DrainResult) CallsPerItem() float64 {
	return float64(r.OutageCalls) / float64(max(r.OutageItems, 1))
}

// Drain drains items through an outage with the Go engine (a handler over a zero
// retryhttp.Transport, SQLite) and with the naive loop.
func Drain(ctx context.Context, o OutageOptions) ([]DrainResult, error) {
	o = o.withDefaults()
	var out []DrainResult
	for _, name := range []string{"engine, defaults", "naive loop (100 ms)"} {
		srv, err := StartServer(ServerOptions{Outage: o.outage, Latency: o.Latency})
		if err != nil {
			return out, err
		}
		vctx, cancel := context.WithTimeout(ctx, o.Limit)
		start := time.Now()
		url := srv.URL + "/v1/complete"
		var c counts
		var tl *timeline
		if o.Trace != nil {
			tl = &timeline{w: o.Trace, start: srv.Rec.Start}
			fmt.Fprintf(o.Trace, "%s: timeline (outage from %.1f s to %.1f s)\n", name, o.Before.Seconds(), (o.Before + o.Outage).Seconds())
		}
		if strings.HasPrefix(name, "engine") && tl != nil {
			c, err = runEngine(vctx, url, o.Items, o.Workers, tl.observe())
		} else if strings.HasPrefix(name, "engine") {
			c, err = runEngine(vctx, url, o.Items, o.Workers)
		} else {
			c, err = runNaive(vctx, url, o.Items, o.Workers)
		}
		cancel()
		srv.Close()
		if err != nil {
			return out, fmt.Errorf("loadbench: drain %s: %w", name, err)
		}
		r := DrainResult{Name: name, Items: o.Items, Succeeded: c.succeeded, Dead: c.dead,
			Unfinished: o.Items - c.succeeded - c.dead - c.canceled, Elapsed: time.Since(start)}
		r.OutageItems, r.OutageCalls = srv.Rec.KeysBetween(o.Before, o.Before+o.Outage)
		r.Rate, r.Recovery = recovery(srv.Rec.Windows(), srv.Rec.Width, o.Before, o.Before+o.Outage)
		if tl != nil {
			end := int((o.Before + o.Outage) / srv.Rec.Width)
			tl.windows(srv.Rec.Windows(), srv.Rec.Width, end-5, end+int((r.Recovery+2*time.Second)/srv.Rec.Width))
		}
		fmt.Fprintf(o.Log, "%s: drain, %s: %d dead, %.2f calls per item in the outage\n", time.Now().UTC().Format("15:04:05"), name, r.Dead, r.CallsPerItem())
		out = append(out, r)
	}
	return out, nil
}

// recovery returns the successful rate per second between 1 s and from, and how long after
// to the rate over a sliding second was back to 90 % of it (negative: never).
func recovery(ws []Window, width, from, to time.Duration) (float64, time.Duration) {
	ok := func(a, b int) int {
		n := 0
		for i := max(a, 0); i < min(b, len(ws)); i++ {
			n += ws[i].OK
		}
		return n
	}
	first, end := int(time.Second/width), int(from/width)
	if end <= first {
		return 0, -1
	}
	rate := float64(ok(first, end)) / (time.Duration(end-first) * width).Seconds()
	per := int(time.Second / width)
	for i := int(to / width); i+per <= len(ws); i++ {
		if float64(ok(i, i+per)) >= 0.9*rate {
			return rate, time.Duration(i)*width - to
		}
	}
	return rate, -1
}
