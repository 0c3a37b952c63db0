package retryhttp

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/redrive/redrive/retry"
)

// DefaultMaxDrain is how many bytes of a failed response's body Transport reads before
// closing it (so the connection can be reused) when Transport.MaxDrain is 0.
const DefaultMaxDrain = 64 << 10

// Transport is an http.RoundTripper that retries failed exchanges per Policy.
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
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
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
	if !t.Retriable(req) {
		return t.base().RoundTrip(req)
	}
	cl := t.Classifier
	if cl == nil {
		cl = &Classifier{}
	}
	var last *http.Response // the failed response of the last attempt, still open
	p := t.Policy
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
		resp, err := t.base().RoundTrip(r)
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
