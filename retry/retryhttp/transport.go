package retryhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/redrive/redrive/retry"
)

// DefaultMaxDrain is how many bytes of a failed response's body Transport reads before
// closing it (so the connection can be reused) when Transport.MaxDrain is 0.
const DefaultMaxDrain = 64 << 10

// DefaultMaxIdleConnsPerHost is how many idle keep-alive connections per host the pooled
// base of a Transport keeps when Transport.MaxIdleConnsPerHost is 0: enough for the
// workers of a busy client, where http.DefaultTransport keeps 2 and so opens a new
// connection for almost every call of more than 2 concurrent callers.
const DefaultMaxIdleConnsPerHost = 64

// Transport is an http.RoundTripper that retries failed exchanges per Policy and paces the
// calls to each host by what the host answers. Its zero value is ready to use and safe by
// default:
//
//   - Calls reuse keep-alive connections: with a nil Base, Transport sends through a pooled
//     *http.Transport of its own that keeps MaxIdleConnsPerHost idle connections per host,
//     and every failed body it does not return is drained (up to MaxDrain bytes) and closed.
//   - Rate limits slow every call to the host, not just the one that got them (flow
//     control, per host, unless NoFlowControl), through a retry.Limiter at its defaults:
//     a slow start (calls evenly spaced from 10 per second, a rate that doubles every
//     2.5 s, and at most 4 calls in flight, one more per success) until the host first
//     pushes back; then a 429, or any status with a Retry-After, cuts the rate by 30 % (at most
//     once per round of calls, never below 1 per second) and successes raise it again
//     (AIMD). A Retry-After closes a retry.Gate: no call to the host goes out before it
//     ends (capped at Policy.MaxRateLimitWait, default 5 minutes), and when it opens the
//     waiting calls leave one by one at the adapted rate, from a random point of the
//     first interval; a 429 without Retry-After closes it for 100 ms, doubling with each
//     round of such answers in a row (the calls refused together count once) up to 10 s.
//   - An outage pauses the host: after 3 failures in a row (5xx without Retry-After,
//     transport errors) calls wait while one probe at a time tests the host, after a pause
//     that grows from 250 ms to at most 1 s; the first answer that is not a failure
//     reopens it.
//   - Retries honour a budget: with a nil Policy.Budget, a Budget of the Transport's own
//     at retry.BudgetOptions defaults (retries at most 10 % of requests, plus 1 per
//     second) grants every retry, so that an outage is not multiplied.
//
// One flow control per dependency, outside the attempt: inside a redrive engine stage the
// stage's flow control (redrive.RateLimit) paces the calls, before the attempt and its
// timeout start, and the transport sends without its own. The engine marks every
// attempt's context with the stage's flow (retry.Paced); the transport finds it there
// (retry.OuterPacer), tells it that the stage calls over the network, so that the stage
// does what the transport would (its slow start ramps by time from 10 calls per second,
// 3 failures in a row pause it), and skips the pacing, gate and outage pause above (its
// retries, budget, pooling and draining stay). Two flow controls in a row would wait twice, and the transport's waits would
// run inside the attempt: under the stage's timeout an item could die of waiting for a
// call it never sent. A stage with RateLimit.Off paces nothing, and neither does the
// transport inside it. Outside an engine stage (a plain request, or one inside retry.Do)
// the transport paces as described; set NoFlowControl when something else paces.
//
// A Transport must not be copied after first use.
//
// Only requests that are safe to repeat are retried: idempotent methods (GET, HEAD,
// OPTIONS, TRACE, PUT, DELETE), and other methods (POST, PATCH) that carry an
// Idempotency-Key header or when RetryNonIdempotent is set; in every case the body must be
// replayable (no body, or Request.GetBody set, as http.NewRequest does for in-memory
// bodies). Other requests are sent once.
//
// The body of a failed response that will be retried is drained (up to MaxDrain bytes)
// and closed. When Transport gives up on a failed status (attempts, time, budget or
// breaker exhausted, or a final status) it returns that last response, not an error, so
// callers see the 429 or 503 and its body. Transport errors are returned as the *retry.Error
// of retry.DoValue. Inside an outer retry.Do (the request's context), Transport makes one
// attempt per outer attempt like any nested layer; use retryhttp.StatusError on the
// response to let the outer layer classify it.
type Transport struct {
	// Base sends each attempt; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Policy is the retry policy; its zero value retries 3 times with the package defaults.
	// Its Classifier classifies transport errors (nil: retry.DefaultClassifier).
	Policy retry.Policy
	// Classifier classifies responses; nil means the default Classifier.
	Classifier *Classifier
	// RetryNonIdempotent allows retrying POST and PATCH requests with a replayable body
	// even without an Idempotency-Key header. False by default.
	RetryNonIdempotent bool
	// MaxDrain bounds the bytes read from a failed body before closing it; 0 means 64 KiB.
	MaxDrain int64
	// MaxIdleConnsPerHost is the idle keep-alive connections per host of the pooled base
	// used when Base is nil; 0 means DefaultMaxIdleConnsPerHost (64). Size it to the
	// number of concurrent callers when they are more.
	MaxIdleConnsPerHost int
	// NoFlowControl turns off the pacing, gate and outage pause described above; retries
	// still follow Policy. Set it when something outside the request paces the calls to
	// the host. A request whose context carries an outer layer's flow control
	// (retry.OuterPacer: every attempt of a redrive engine stage) is sent without the
	// transport's flow control whatever this field says. False by default.
	NoFlowControl bool

	once   sync.Once
	pool   *http.Transport // the base when Base is nil
	budget *retry.Budget   // the budget when Policy.Budget is nil
	mu     sync.Mutex
	flows  map[string]*flow // by host
}

func (t *Transport) init() {
	t.once.Do(func() {
		if t.Base == nil {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.MaxIdleConnsPerHost = t.MaxIdleConnsPerHost
			if tr.MaxIdleConnsPerHost <= 0 {
				tr.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
			}
			tr.MaxIdleConns = 0 // no limit across hosts: the per-host one bounds them
			t.pool = tr
		}
		if t.Policy.Budget == nil {
			t.budget = retry.NewBudget(retry.BudgetOptions{})
		}
		t.flows = map[string]*flow{}
	})
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return t.pool
}

// CloseIdleConnections closes the idle connections of the base transport, when it has
// such a method (the pooled base does), so that http.Client.CloseIdleConnections works.
func (t *Transport) CloseIdleConnections() {
	t.init()
	if c, ok := t.base().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// flowFor returns the flow of req's host, or nil when the transport's flow control is
// off or an outer layer owns the flow control of req's calls (retry.OuterPacer), which
// it then tells that the calls go over the network.
func (t *Transport) flowFor(req *http.Request) *flow {
	if p, ok := retry.OuterPacer(req.Context()); ok {
		if p != nil {
			p.NetworkDependency()
		}
		return nil
	}
	if t.NoFlowControl {
		return nil
	}
	host := req.URL.Host
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.flows[host]
	if f == nil {
		f = newFlow()
		t.flows[host] = f
	}
	return f
}

// send sends one attempt through the host's flow.
func (t *Transport) send(req *http.Request, cl *Classifier) (*http.Response, error) {
	f := t.flowFor(req)
	if f == nil {
		return t.base().RoundTrip(req)
	}
	permit, probe, err := f.acquire(req.Context())
	if err != nil {
		return nil, err
	}
	resp, err := t.base().RoundTrip(req)
	s, after := sigSuccess, time.Duration(0)
	switch {
	case err != nil && req.Context().Err() != nil:
		s = sigCancelled
	case err != nil:
		s = sigFailure
	default:
		o := cl.Classify(resp, nil)
		switch {
		case o.Class == retry.ClassRateLimited || resp.StatusCode == http.StatusTooManyRequests:
			s, after = sigPushback, min(o.RetryAfter, t.maxRateLimitWait())
		case o.Class == retry.ClassRetryable && resp.StatusCode >= 500:
			s = sigFailure
		}
	}
	f.record(permit, probe, s, after)
	return resp, err
}

func (t *Transport) maxRateLimitWait() time.Duration {
	if t.Policy.MaxRateLimitWait > 0 {
		return t.Policy.MaxRateLimitWait
	}
	return retry.DefaultMaxRateLimitWait
}

// Retriable reports whether t may send req more than once.
func (t *Transport) Retriable(req *http.Request) bool {
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	if !replayable {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	if req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != "" {
		return true
	}
	return t.RetryNonIdempotent && req.GetBody != nil
}

func (t *Transport) drain(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	n := t.MaxDrain
	if n <= 0 {
		n = DefaultMaxDrain
	}
	_, _ = io.CopyN(io.Discard, resp.Body, n)
	_ = resp.Body.Close()
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.init()
	cl := t.Classifier
	if cl == nil {
		cl = &Classifier{}
	}
	if !t.Retriable(req) {
		return t.send(req, cl)
	}
	var last *http.Response // the failed response of the last attempt, still open
	p := t.Policy
	if p.Budget == nil {
		p.Budget = t.budget
	}
	userOnRetry := p.OnRetry
	p.OnRetry = func(e retry.Event) {
		t.drain(last) // it will be retried: free the connection
		last = nil
		if userOnRetry != nil {
			userOnRetry(e)
		}
	}
	attempt := 0
	resp, err := retry.DoValue(req.Context(), p, func(ctx context.Context) (*http.Response, error) {
		attempt++
		r := req
		if attempt > 1 {
			r = req.Clone(req.Context())
			if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
				body, err := req.GetBody()
				if err != nil {
					return nil, retry.Final(err)
				}
				r.Body = body
			}
		}
		resp, err := t.send(r, cl)
		if err != nil {
			return nil, err
		}
		if !Failed(resp, nil) {
			return resp, nil
		}
		last = resp
		return nil, cl.StatusError(resp)
	})
	if err == nil {
		return resp, nil
	}
	if last != nil {
		var he *HTTPError
		if errors.As(err, &he) {
			return last, nil
		}
		t.drain(last)
	}
	return nil, err
}
