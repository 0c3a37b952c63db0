package retryhttp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive/retry"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 120 * time.Second, true},
		{" 0 ", 0, true},
		{"-5", 0, true},
		{"Wed, 21 Oct 2015 07:28:30 GMT", 30 * time.Second, true},   // IMF-fixdate
		{"Wednesday, 21-Oct-15 07:29:00 GMT", time.Minute, true},    // RFC 850
		{"Wed Oct 21 07:28:10 2015", 10 * time.Second, true},        // ANSI C asctime
		{"Tue, 20 Oct 2015 07:28:00 GMT", 0, true},                  // past
		{"99999999999999999999999", time.Duration(1<<63 - 1), true}, // saturates
		{"", 0, false},
		{"soon", 0, false},
		{"1.5", 0, false},
		{"12abc", 0, false},
		{"-", 0, false},
		{"Wed, 32 Oct 2015 07:28:00 GMT", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "-1", "Wed, 21 Oct 2015 07:28:00 GMT", "Wednesday, 21-Oct-15 07:28:00 GMT",
		"Wed Oct 21 07:28:00 2015", "", "garbage", "1e9", "18446744073709551616", " 7 "} {
		f.Add(s)
	}
	now := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseRetryAfter(s, now)
		if d < 0 {
			t.Fatalf("negative %v for %q", d, s)
		}
		if !ok && d != 0 {
			t.Fatalf("not ok but %v for %q", d, s)
		}
		// The outcome built on it stays within the policy's cap.
		if ok {
			p := retry.Policy{}
			if w := p.RateLimitDelay(d, 1); w < 0 || w > retry.DefaultMaxRateLimitWait {
				t.Fatalf("RateLimitDelay(%v) = %v", d, w)
			}
		}
	})
}

func resp(code int, retryAfter string) *http.Response {
	r := &http.Response{StatusCode: code, Header: http.Header{}}
	if retryAfter != "" {
		r.Header.Set("Retry-After", retryAfter)
	}
	return r
}

func TestClassify(t *testing.T) {
	R, F, L := retry.ClassRetryable, retry.ClassFinal, retry.ClassRateLimited
	tests := []struct {
		r     *http.Response
		class retry.Class
		after time.Duration
	}{
		{resp(200, ""), F, 0},
		{resp(304, ""), F, 0},
		{resp(429, "7"), L, 7 * time.Second},
		{resp(503, "3"), L, 3 * time.Second},
		{resp(429, ""), L, 0}, // rate limited without a wait: the caller backs off
		{resp(429, "junk"), L, 0},
		{resp(503, ""), R, 0},
		{resp(500, "5"), R, 0},
		{resp(408, ""), R, 0}, {resp(425, ""), R, 0}, {resp(502, ""), R, 0}, {resp(504, ""), R, 0},
		{resp(520, ""), R, 0},
		{resp(501, ""), F, 0}, {resp(505, ""), F, 0},
		{resp(400, ""), F, 0}, {resp(401, ""), F, 0}, {resp(404, ""), F, 0}, {resp(422, ""), F, 0},
	}
	for _, tt := range tests {
		o := Classify(tt.r, nil)
		if o.Class != tt.class || o.RetryAfter != tt.after {
			t.Errorf("%d %q: %+v, want %v %v", tt.r.StatusCode, tt.r.Header.Get("Retry-After"), o, tt.class, tt.after)
		}
	}
	if o := Classify(nil, &net.DNSError{Err: "no such host", IsNotFound: true}); o.Class != F {
		t.Errorf("dns: %v", o)
	}
	if o := Classify(nil, io.ErrUnexpectedEOF); o.Class != R {
		t.Errorf("eof: %v", o)
	}
	// Overridden sets.
	c := Classifier{Retryable: []int{409}, RateLimited: []int{}, Final5xx: []int{500}}
	if c.Classify(resp(409, ""), nil).Class != R || c.Classify(resp(429, "1"), nil).Class != F || c.Classify(resp(500, ""), nil).Class != F {
		t.Error("overrides ignored")
	}
}

func TestStatusError(t *testing.T) {
	if StatusError(resp(204, "")) != nil {
		t.Error("success must give nil")
	}
	r := resp(429, "2")
	r.Status = "429 Too Many Requests"
	r.Request, _ = http.NewRequest("GET", "https://user:pw@example.com/x", nil)
	err := StatusError(r)
	o := retry.Classify(err)
	if o.Class != retry.ClassRateLimited || o.RetryAfter != 2*time.Second {
		t.Errorf("classified %+v", o)
	}
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != 429 || strings.Contains(err.Error(), "pw") {
		t.Errorf("err = %v", err)
	}
	if retry.Classify(StatusError(resp(404, ""))).Class != retry.ClassFinal {
		t.Error("404 must be final")
	}
}

// server counts the requests it handled.
type server struct {
	*httptest.Server
	calls atomic.Int32
}

func newServer(t *testing.T, h func(n int32, w http.ResponseWriter, r *http.Request)) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(s.calls.Add(1), w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// fastPolicy retries n times within milliseconds. Its budget is generous: these tests are
// about retrying, and the Transport's default budget grants a lone caller about one retry
// a second.
func fastPolicy(n int) retry.Policy {
	return retry.Policy{MaxAttempts: n, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, JitterMode: retry.JitterNone,
		Budget: retry.NewBudget(retry.BudgetOptions{MinPerSecond: 1000})}
}

func TestTransportRateLimitedThenOK(t *testing.T) {
	s := newServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
		if n <= 2 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			return
		}
		io.WriteString(w, "ok")
	})
	var waits []time.Duration
	p := fastPolicy(1) // rate-limited waits do not consume attempts
	p.MaxRateLimitWait = 20 * time.Millisecond
	p.OnRetry = func(e retry.Event) { waits = append(waits, e.Delay) }
	c := &http.Client{Transport: &Transport{Policy: p}}
	res, err := c.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "ok" || s.calls.Load() != 3 {
		t.Fatalf("body %q calls %d", b, s.calls.Load())
	}
	for _, w := range waits {
		if w != 20*time.Millisecond { // Retry-After 1s capped at MaxRateLimitWait
			t.Errorf("wait %v", w)
		}
	}
	if len(waits) != 2 {
		t.Errorf("waits %v", waits)
	}
}

func TestTransportReturnsLastResponse(t *testing.T) {
	s := newServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		io.WriteString(w, "down "+strings.Repeat("x", 100))
	})
	c := &http.Client{Transport: &Transport{Policy: fastPolicy(3)}}
	res, err := c.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 503 || !strings.HasPrefix(string(b), "down") || s.calls.Load() != 3 {
		t.Fatalf("status %d body %q calls %d", res.StatusCode, b, s.calls.Load())
	}
	// A final status is not retried and is returned as is.
	s2 := newServer(t, func(n int32, w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) })
	res, err = c.Get(s2.URL)
	if err != nil || res.StatusCode != 404 || s2.calls.Load() != 1 {
		t.Fatalf("404: %v %v %d", res, err, s2.calls.Load())
	}
	res.Body.Close()
}

// TestTransportConnectionReset: the server resets the connection (linger 0) twice.
func TestTransportConnectionReset(t *testing.T) {
	s := newServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
		if n <= 2 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
			return
		}
		io.WriteString(w, "ok")
	})
	var errs []error
	p := fastPolicy(3)
	p.OnRetry = func(e retry.Event) { errs = append(errs, e.Err) }
	// DisableKeepAlives: no pooled connection, so net/http's own retry does not hide resets.
	c := &http.Client{Transport: &Transport{Base: &http.Transport{DisableKeepAlives: true}, Policy: p}}
	res, err := c.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || s.calls.Load() != 3 {
		t.Fatalf("status %d calls %d", res.StatusCode, s.calls.Load())
	}
	for _, e := range errs {
		if retry.Classify(e).Class != retry.ClassRetryable {
			t.Errorf("reset error %v not retryable", e)
		}
	}
	// Exhausted: an error wrapping the last network error.
	s2 := newServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	})
	_, err = c.Get(s2.URL)
	var re *retry.Error
	if !errors.As(err, &re) || re.Attempts != 3 || s2.calls.Load() != 3 {
		t.Fatalf("err %v calls %d", err, s2.calls.Load())
	}
}

func TestTransportPOST(t *testing.T) {
	s := newServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) != "payload" {
			t.Errorf("attempt %d body %q", n, b)
		}
		if n == 1 {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(201)
	})
	post := func(tr *Transport, key string) int32 {
		s.calls.Store(0)
		req, _ := http.NewRequest("POST", s.URL, strings.NewReader("payload"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return s.calls.Load()
	}
	if n := post(&Transport{Policy: fastPolicy(3)}, ""); n != 1 {
		t.Errorf("plain POST sent %d times, want 1", n)
	}
	if n := post(&Transport{Policy: fastPolicy(3)}, "k-1"); n != 2 {
		t.Errorf("POST with Idempotency-Key sent %d times, want 2", n)
	}
	if n := post(&Transport{Policy: fastPolicy(3), RetryNonIdempotent: true}, ""); n != 2 {
		t.Errorf("opted-in POST sent %d times, want 2", n)
	}
	// A body that cannot be replayed is never retried, even for PUT.
	s.calls.Store(0)
	req, _ := http.NewRequest("PUT", s.URL, io.NopCloser(strings.NewReader("payload")))
	res, err := (&http.Client{Transport: &Transport{Policy: fastPolicy(3)}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if s.calls.Load() != 1 {
		t.Errorf("non-replayable PUT sent %d times", s.calls.Load())
	}
}

// closeTracker wraps a RoundTripper and records whether failed bodies were closed and drained.
type closeTracker struct {
	base   http.RoundTripper
	bodies []*trackedBody
}

type trackedBody struct {
	io.ReadCloser
	read   int
	closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += n
	return n, err
}
func (b *trackedBody) Close() error { b.closed = true; return b.ReadCloser.Close() }

func (c *closeTracker) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := c.base.RoundTrip(r)
	if err == nil {
		tb := &trackedBody{ReadCloser: res.Body}
		res.Body = tb
		c.bodies = append(c.bodies, tb)
	}
	return res, err
}

func TestTransportDrainsFailedBodies(t *testing.T) {
	big := strings.Repeat("y", 200<<10)
	s := newServer(t, func(n int32, w http.ResponseWriter, r *http.Request) {
		if n <= 2 {
			w.WriteHeader(502)
			io.WriteString(w, big)
			return
		}
		io.WriteString(w, "ok")
	})
	ct := &closeTracker{base: http.DefaultTransport}
	c := &http.Client{Transport: &Transport{Base: ct, Policy: fastPolicy(3), MaxDrain: 1024}}
	res, err := c.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if len(ct.bodies) != 3 {
		t.Fatalf("%d bodies", len(ct.bodies))
	}
	for i, b := range ct.bodies[:2] {
		if !b.closed || b.read == 0 || b.read > 1024 {
			t.Errorf("failed body %d: closed=%v read=%d", i, b.closed, b.read)
		}
	}
}

func TestTransportNestedUnderDo(t *testing.T) {
	s := newServer(t, func(n int32, w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
	c := &http.Client{Transport: &Transport{Policy: fastPolicy(3)}}
	err := retry.Do(context.Background(), fastPolicy(3), func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL, nil)
		res, err := c.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		return StatusError(res)
	})
	if s.calls.Load() != 3 {
		t.Errorf("calls %d, want 3 (not 9)", s.calls.Load())
	}
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != 503 {
		t.Errorf("err %v", err)
	}
}
