package flaky_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/redrive/redrive/examples/flakyapi/flaky"
)

// TestLimit: with Limit 1/s and Burst 3, three requests get through at once and the next
// ones are answered 429 with a Retry-After, counted as over_limit, not as random 429s; a
// request over the limit does not use up the body's deterministic draw.
func TestLimit(t *testing.T) {
	h := flaky.NewHandler(flaky.Options{Limit: 1, Burst: 3})
	srv := httptest.NewServer(h)
	defer srv.Close()
	var codes []int
	for range 6 {
		resp, _ := post(t, srv.Client(), srv.URL, `{"prompt":"a b c"}`)
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || secs < 1 {
				t.Errorf("Retry-After %q, want whole seconds >= 1", resp.Header.Get("Retry-After"))
			}
		}
	}
	ok := 0
	for _, c := range codes {
		if c == http.StatusOK {
			ok++
		}
	}
	// 1 per second may refill one token while the six requests run.
	if ok < 3 || ok > 4 || codes[0] != 200 || codes[5] != 429 {
		t.Fatalf("codes %v, want the burst of 3 through and the rest 429", codes)
	}
	st := h.Stats()
	if st[flaky.KindOverLimit] != 6-ok || st[flaky.KindRateLimit] != 0 || st[flaky.KindOK] != ok {
		t.Errorf("stats %v", st)
	}
	if err := (flaky.Options{Limit: -1}).Validate(); err == nil {
		t.Error("a negative limit was accepted")
	}
}
