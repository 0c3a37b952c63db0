package flaky_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive/examples/flakyapi/flaky"
)

func post(t *testing.T, c *http.Client, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Post(url+"/v1/complete", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return resp, b
}

func TestRatesWithFixedSeed(t *testing.T) {
	o := flaky.Options{Rate429: 0.10, Rate500: 0.05, RateSlow: 0.02, RateMalformed: 0.03, Seed: 42}
	const n = 20000
	got := map[flaky.Kind]int{}
	for i := range n {
		got[flaky.Decide(o, fmt.Appendf(nil, `{"prompt":"item %d"}`, i), 0)]++
	}
	want := map[flaky.Kind]float64{flaky.KindRateLimit: 0.10, flaky.KindServer: 0.05, flaky.KindSlow: 0.02, flaky.KindMalformed: 0.03, flaky.KindOK: 0.80}
	for k, p := range want {
		// Binomial: allow 4.5 standard deviations (false failure odds < 1e-5,
		// and the seed is fixed anyway).
		sd := math.Sqrt(n * p * (1 - p))
		if d := math.Abs(float64(got[k]) - n*p); d > 4.5*sd {
			t.Errorf("%s: %d answers of %d, want %.0f ± %.0f", k, got[k], n, n*p, 4.5*sd)
		}
	}
}

func TestDeterministic(t *testing.T) {
	o := flaky.Options{Rate429: 0.3, Rate500: 0.3, Seed: 7}
	body := []byte(`{"prompt":"hello"}`)
	var a, b []flaky.Kind
	for n := range uint64(50) {
		a = append(a, flaky.Decide(o, body, n))
		b = append(b, flaky.Decide(o, body, n))
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("Decide is not deterministic")
	}
	o.Seed = 8
	var c []flaky.Kind
	for n := range uint64(50) {
		c = append(c, flaky.Decide(o, body, n))
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatal("another seed gave the same 50 answers")
	}
	// Repeated requests with one body do not all get the same answer, so
	// retries can succeed.
	kinds := map[flaky.Kind]bool{}
	for _, k := range a {
		kinds[k] = true
	}
	if len(kinds) < 2 {
		t.Fatalf("50 requests with one body all got %v", a[0])
	}
}

func TestRateLimitedHasRetryAfter(t *testing.T) {
	h := flaky.NewHandler(flaky.Options{Rate429: 1, RetryAfter: 1500 * time.Millisecond})
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, _ := post(t, srv.Client(), srv.URL, `{"prompt":"x"}`)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	ra := resp.Header.Get("Retry-After")
	if secs, err := strconv.Atoi(ra); err != nil || secs != 2 {
		t.Fatalf("Retry-After %q, want 2 (1.5 s rounded up)", ra)
	}
}

func TestAnswers(t *testing.T) {
	srv := httptest.NewServer(flaky.NewHandler(flaky.Options{}))
	defer srv.Close()
	resp, body := post(t, srv.Client(), srv.URL, `{"prompt":"one two three"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var r flaky.Response
	if err := json.Unmarshal(body, &r); err != nil || r.Completion != "three two one" {
		t.Fatalf("answer %s (%v)", body, err)
	}
	resp, _ = post(t, srv.Client(), srv.URL, `{"prompt":`)
	if resp.StatusCode != 400 {
		t.Fatalf("invalid request: status %d, want 400", resp.StatusCode)
	}
	resp, _ = post(t, srv.Client(), srv.URL, `{"prompt":""}`)
	if resp.StatusCode != 400 {
		t.Fatalf("empty prompt: status %d, want 400", resp.StatusCode)
	}
}

func TestServerErrorMalformedAndSlow(t *testing.T) {
	for _, tc := range []struct {
		o     flaky.Options
		check func(*http.Response, []byte) error
	}{
		{flaky.Options{Rate500: 1}, func(r *http.Response, _ []byte) error {
			if r.StatusCode != 500 {
				return fmt.Errorf("status %d, want 500", r.StatusCode)
			}
			return nil
		}},
		{flaky.Options{RateMalformed: 1}, func(r *http.Response, b []byte) error {
			if r.StatusCode != 200 || json.Valid(b) {
				return fmt.Errorf("status %d body %q, want 200 and invalid JSON", r.StatusCode, b)
			}
			return nil
		}},
	} {
		srv := httptest.NewServer(flaky.NewHandler(tc.o))
		resp, body := post(t, srv.Client(), srv.URL, `{"prompt":"a b"}`)
		if err := tc.check(resp, body); err != nil {
			t.Error(err)
		}
		srv.Close()
	}

	srv := httptest.NewServer(flaky.NewHandler(flaky.Options{RateSlow: 1, Slow: 2 * time.Second}))
	defer srv.Close()
	c := &http.Client{Timeout: 100 * time.Millisecond}
	start := time.Now()
	if _, err := c.Post(srv.URL+"/v1/complete", "application/json", strings.NewReader(`{"prompt":"a"}`)); err == nil {
		t.Fatal("slow answer did not time out")
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("client timeout took %v", el)
	}
}

func TestStatsConcurrent(t *testing.T) {
	h := flaky.NewHandler(flaky.Options{Rate429: 0.5, Seed: 3})
	srv := httptest.NewServer(h)
	defer srv.Close()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			resp, err := srv.Client().Post(srv.URL+"/v1/complete", "application/json", strings.NewReader(fmt.Sprintf(`{"prompt":"p %d"}`, i)))
			if err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	s := h.Stats()
	if s[flaky.KindRateLimit]+s[flaky.KindOK] != 40 {
		t.Fatalf("stats %v do not add up to 40", s)
	}
	if err := (flaky.Options{Rate429: 0.7, Rate500: 0.7}).Validate(); err == nil {
		t.Fatal("rates summing to 1.4 validated")
	}
}
