package loadbench

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/redrive/redrive/retry/retryhttp"
)

// SentHeader carries the time (Unix nanoseconds) at which the benchmark's client handed
// a request to its connection pool, after the stage's pace and the transport's flow
// control let it go. Beside the server's arrival time it tells a burst of sends (the
// client's pacing, or the client process stalled and released its calls together) from
// a burst of arrivals only (the server stalled and then read calls that were sent spaced).
const SentHeader = "X-Sent-At"

// stampTransport sets SentHeader on each attempt just before sending it.
type stampTransport struct{ base *http.Transport }

// RoundTrip implements http.RoundTripper on a copy of req, which it must not modify.
func (s stampTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set(SentHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
	return s.base.RoundTrip(r)
}

// CloseIdleConnections closes the pool's idle connections.
func (s stampTransport) CloseIdleConnections() { s.base.CloseIdleConnections() }

// benchTransport is the zero retryhttp.Transport of the engine and postgres variants,
// with the same pooled base it builds for itself (DefaultMaxIdleConnsPerHost per host)
// wrapped to stamp each attempt's send time.
func benchTransport() *retryhttp.Transport {
	pool := http.DefaultTransport.(*http.Transport).Clone()
	pool.MaxIdleConnsPerHost = retryhttp.DefaultMaxIdleConnsPerHost
	pool.MaxIdleConns = 0
	return &retryhttp.Transport{Base: stampTransport{pool}}
}

// sentAt parses SentHeader; ok is false when it is missing or malformed.
func sentAt(h http.Header) (time.Time, bool) {
	v := h.Get(SentHeader)
	if v == "" {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// Stall is a spell in which the benchmark's own process did not run a goroutine that
// asked to wake every millisecond: the machine's load, or the garbage collector.
type Stall struct {
	// At is when the spell began, since the server's start.
	At time.Duration
	// Late is how much later than asked the goroutine woke.
	Late time.Duration
}

// stallWatch records every wake-up of a 1 ms sleep that comes more than min late, until
// ctx is done.
type stallWatch struct {
	mu     sync.Mutex
	stalls []Stall
	done   chan struct{}
}

func watchStalls(ctx context.Context, start time.Time, min time.Duration) *stallWatch {
	w := &stallWatch{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		const tick = time.Millisecond
		t := time.NewTimer(tick)
		defer t.Stop()
		for {
			before := time.Now()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if late := time.Since(before) - tick; late > min {
				w.mu.Lock()
				w.stalls = append(w.stalls, Stall{At: before.Sub(start), Late: late})
				w.mu.Unlock()
			}
			t.Reset(tick)
		}
	}()
	return w
}

// stop ends the watch and returns the stalls it saw.
func (w *stallWatch) stop(cancel context.CancelFunc) []Stall {
	cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stalls
}
