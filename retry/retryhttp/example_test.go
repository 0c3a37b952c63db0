package retryhttp_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/retry/retryhttp"
)

// A retrying http.Client: the server answers 503 once, then 200, and the
// Transport retries the GET after a short backoff. The caller sees only
// the final response.
func ExampleTransport() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()

	client := &http.Client{Transport: &retryhttp.Transport{
		Policy: retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond},
	}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", calls.Load(), "calls")
	// Output:
	// 200 after 2 calls
}

// Retry-After comes as a number of seconds or as an HTTP date, measured
// from now; an unparsable value reports false.
func ExampleParseRetryAfter() {
	now := time.Date(2015, 10, 21, 7, 27, 0, 0, time.UTC)
	fmt.Println(retryhttp.ParseRetryAfter("120", now))
	fmt.Println(retryhttp.ParseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT", now))
	fmt.Println(retryhttp.ParseRetryAfter("soon", now))
	// Output:
	// 2m0s true
	// 1m0s true
	// 0s false
}

// A 429 with Retry-After is rate limited: wait as asked, without spending
// an attempt. StatusError turns the response into an error that retry.Do
// (and the durable engine) classify the same way.
func ExampleClassify() {
	resp := &http.Response{
		StatusCode: http.StatusTooManyRequests,
		Status:     "429 Too Many Requests",
		Header:     http.Header{"Retry-After": {"30"}},
	}
	out := retryhttp.Classify(resp, nil)
	fmt.Println(out.Class, out.RetryAfter)

	err := retryhttp.StatusError(resp)
	var he *retryhttp.HTTPError
	if errors.As(err, &he) {
		fmt.Println(he.RetryClass())
	}
	// Output:
	// rate_limited 30s
	// rate_limited 30s
}
