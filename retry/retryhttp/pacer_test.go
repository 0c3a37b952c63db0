package retryhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive/retry"
)

type countingPacer struct{ n atomic.Int64 }

func (p *countingPacer) NetworkDependency() { p.n.Add(1) }

// TestTransportLeavesPacingToOuterPacer: under a context whose outer layer owns the flow
// control (retry.Paced, as redrive's engine marks every attempt), a 429 with
// Retry-After: 30 closes no gate in the Transport: the next calls go out at once, each
// telling the outer pacer that it calls over the network. A nil pacer (the stage's flow
// control is off) paces nothing either. Inside a plain retry.Do, which paces nothing,
// the Transport still holds the next call back for the Retry-After. Before, the
// Transport paced under every context, inside the outer layer's attempt.
func TestTransportLeavesPacingToOuterPacer(t *testing.T) {
	newServer := func() *connServer {
		return newConnServer(t, func(i int, w http.ResponseWriter, r *http.Request) {
			if i == 1 {
				w.Header().Set("Retry-After", "30")
				w.WriteHeader(429)
				return
			}
			io.WriteString(w, "ok")
		})
	}
	// send POSTs (sent once: no Idempotency-Key) with ctx, each bounded by 2 s, and
	// returns their statuses (0 for an error).
	send := func(ctx context.Context, tr *Transport, url string, n int) []int {
		var codes []int
		for range n {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			req, _ := http.NewRequestWithContext(cctx, http.MethodPost, url, nil)
			resp, err := tr.RoundTrip(req)
			code := 0
			if err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			} else if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("call: %v", err)
			}
			cancel()
			codes = append(codes, code)
		}
		return codes
	}
	outer := retry.Layer(context.Background())

	t.Run("outer pacer", func(t *testing.T) {
		s := newServer()
		tr := &Transport{}
		defer tr.CloseIdleConnections()
		p := &countingPacer{}
		codes := send(retry.Paced(outer, p), tr, s.URL, 4)
		if want := []int{429, 200, 200, 200}; !slices.Equal(codes, want) {
			t.Errorf("statuses %v, want %v: the transport must not hold calls for the Retry-After", codes, want)
		}
		if got := p.n.Load(); got != 4 {
			t.Errorf("NetworkDependency called %d times, want once per call (4)", got)
		}
	})
	t.Run("outer flow control off", func(t *testing.T) {
		s := newServer()
		tr := &Transport{}
		defer tr.CloseIdleConnections()
		codes := send(retry.Paced(outer, nil), tr, s.URL, 3)
		if want := []int{429, 200, 200}; !slices.Equal(codes, want) {
			t.Errorf("statuses %v, want %v", codes, want)
		}
	})
	t.Run("plain retry.Do", func(t *testing.T) {
		s := newServer()
		tr := &Transport{}
		defer tr.CloseIdleConnections()
		codes := send(outer, tr, s.URL, 2)
		if want := []int{429, 0}; !slices.Equal(codes, want) {
			t.Errorf("statuses %v, want %v: the gate holds the second call past its 2 s", codes, want)
		}
		if n := len(s.arrivals()); n != 1 {
			t.Errorf("%d calls reached the server, want 1", n)
		}
	})
}
