// Package retryhttp applies package retry to HTTP: it classifies responses (Classify,
// Classifier), parses Retry-After (ParseRetryAfter), turns failed responses into
// classified errors (StatusError) and provides a retrying http.RoundTripper (Transport).
//
// Classification (the defaults of Classifier): 429 and 503 with a valid Retry-After are
// rate-limited with the parsed wait, and 429 without one is rate-limited with no wait (the
// retrying layer then waits a growing delay, without spending attempts); 408, 425, 429, 500, 502, 503 and 504 are retryable,
// as are other 5xx except 501 and 505; other 4xx are final; transport errors are
// classified by retry.Network, then retry.DefaultClassifier.
package retryhttp

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive/retry"
)

// ParseRetryAfter parses a Retry-After header value in either form, delta-seconds
// ("120") or an HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT", measured from now). A date in
// the past, or a negative number, gives 0 and true; anything else unparsable gives 0 and
// false. Huge values saturate at the largest time.Duration.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	digits := v
	neg := false
	if v[0] == '-' {
		digits, neg = v[1:], true
	}
	if digits != "" && strings.Trim(digits, "0123456789") == "" {
		if neg {
			return 0, true
		}
		n, err := strconv.ParseInt(digits, 10, 64)
		if err != nil || n > math.MaxInt64/int64(time.Second) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if !t.After(now) {
		return 0, true
	}
	return t.Sub(now), true // Sub saturates
}

// Default status sets of Classifier.
var (
	defaultRetryable   = []int{408, 425, 429, 500, 502, 503, 504}
	defaultRateLimited = []int{429, 503}
	defaultFinal5xx    = []int{501, 505}
	defaultThrottled   = []int{429}
)

// Classifier classifies HTTP responses. The zero value uses the defaults documented on
// each field; set a field to override one set.
type Classifier struct {
	// Retryable lists statuses retried with backoff; nil means 408, 425, 429, 500, 502,
	// 503, 504. Statuses >= 500 not listed here nor in Final5xx are retryable too.
	Retryable []int
	// RateLimited lists statuses whose valid Retry-After makes them rate-limited;
	// nil means 429, 503.
	RateLimited []int
	// Throttled lists statuses that are rate-limited even without a valid Retry-After
	// (with no wait of their own: the retrying layer waits a growing delay); nil means 429.
	// A status must also be in RateLimited.
	Throttled []int
	// Final5xx lists 5xx statuses that are final; nil means 501, 505.
	Final5xx []int
	// Now returns the current time for HTTP-date Retry-After values; nil means time.Now.
	Now func() time.Time
}

func orDefault(s, d []int) []int {
	if s == nil {
		return d
	}
	return s
}

// Failed reports whether (resp, err) is a failure: err is not nil or the status is 4xx/5xx.
func Failed(resp *http.Response, err error) bool {
	return err != nil || resp == nil || resp.StatusCode >= 400
}

// Classify classifies one exchange. For a transport error it uses retry.Network, then
// retry.DefaultClassifier. For a response that is not a failure (status < 400) it
// returns ClassFinal: there is nothing to retry.
func (c *Classifier) Classify(resp *http.Response, err error) retry.Outcome {
	if err != nil {
		if o, ok := retry.Network(err); ok {
			return o
		}
		return retry.Classify(err)
	}
	if resp == nil {
		return retry.Outcome{Class: retry.ClassRetryable}
	}
	code := resp.StatusCode
	if slices.Contains(orDefault(c.RateLimited, defaultRateLimited), code) {
		if v := resp.Header.Get("Retry-After"); v != "" {
			now := time.Now
			if c.Now != nil {
				now = c.Now
			}
			if d, ok := ParseRetryAfter(v, now()); ok {
				return retry.Outcome{Class: retry.ClassRateLimited, RetryAfter: d}
			}
		}
		if slices.Contains(orDefault(c.Throttled, defaultThrottled), code) {
			return retry.Outcome{Class: retry.ClassRateLimited}
		}
	}
	switch {
	case slices.Contains(orDefault(c.Retryable, defaultRetryable), code):
		return retry.Outcome{Class: retry.ClassRetryable}
	case code >= 500 && !slices.Contains(orDefault(c.Final5xx, defaultFinal5xx), code):
		return retry.Outcome{Class: retry.ClassRetryable}
	}
	return retry.Outcome{Class: retry.ClassFinal}
}

// Classify classifies one exchange with the default Classifier.
func Classify(resp *http.Response, err error) retry.Outcome {
	var c Classifier
	return c.Classify(resp, err)
}

// HTTPError is a failed HTTP response as a classified error (see StatusError).
type HTTPError struct {
	// StatusCode and Status are those of the response.
	StatusCode int
	Status     string
	// Method and URL identify the request, when known.
	Method, URL string
	// Outcome is the classification of the response.
	Outcome retry.Outcome
}

// Error returns e.g. "GET https://api.example.com/v1: 503 Service Unavailable".
func (e *HTTPError) Error() string {
	status := e.Status
	if status == "" {
		status = fmt.Sprintf("%d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	if e.URL == "" {
		return "http: " + status
	}
	return e.Method + " " + e.URL + ": " + status
}

// RetryClass implements retry.ClassedError.
func (e *HTTPError) RetryClass() (retry.Class, time.Duration) {
	return e.Outcome.Class, e.Outcome.RetryAfter
}

// StatusError returns nil for a response that is not a failure (status < 400), else an
// *HTTPError classified by the default Classifier, so that retry.Do (and a durable
// engine) treat it correctly. It does not read or close the body.
func StatusError(resp *http.Response) error {
	var c Classifier
	return c.StatusError(resp)
}

// StatusError is the package-level StatusError with c's classification.
func (c *Classifier) StatusError(resp *http.Response) error {
	if resp == nil || resp.StatusCode < 400 {
		return nil
	}
	e := &HTTPError{StatusCode: resp.StatusCode, Status: resp.Status, Outcome: c.Classify(resp, nil)}
	if resp.Request != nil {
		e.Method = resp.Request.Method
		if resp.Request.URL != nil {
			e.URL = resp.Request.URL.Redacted()
		}
	}
	return e
}
