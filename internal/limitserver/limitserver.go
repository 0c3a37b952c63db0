// Package limitserver is an HTTP server on loopback that enforces a token-bucket rate
// limit, as a rate-limited API does, for the engine's flow-control tests: it answers
// 200 while it has a token, else 429 (with a Retry-After when configured), and records
// every request's arrival so that tests can check the rate the server saw.
package limitserver

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Options configures a Server.
type Options struct {
	// Rate is the refill rate in requests per second.
	Rate float64
	// Burst is the bucket's capacity; 0 means 1.
	Burst int
	// RetryAfter, when positive, is sent in whole seconds with every 429.
	RetryAfter time.Duration
}

// Server is a running token-bucket server.
type Server struct {
	// URL is the server's address, http://127.0.0.1:port/.
	URL string

	o   Options
	srv *http.Server

	mu       sync.Mutex
	tokens   float64
	last     time.Time
	arrivals []time.Time
	ok, full int
	down     func(time.Time) bool
	retryFor func(time.Time) time.Duration
}

// Start starts a server on a free loopback port.
func Start(o Options) (*Server, error) {
	if o.Burst <= 0 {
		o.Burst = 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String() + "/", o: o, tokens: float64(o.Burst), last: time.Now()}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// SetDown makes the server answer 503 without Retry-After while down reports true
// for the arrival time (an outage); nil ends it.
func (s *Server) SetDown(down func(time.Time) bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// SetRefuse makes every request refused with 429 and the Retry-After it returns while
// it returns a positive duration (a dependency over its limit for everybody).
func (s *Server) SetRefuse(f func(time.Time) time.Duration) {
	s.mu.Lock()
	s.retryFor = f
	s.mu.Unlock()
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	s.arrivals = append(s.arrivals, now)
	if s.down != nil && s.down(now) {
		s.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var refuse time.Duration
	if s.retryFor != nil {
		refuse = s.retryFor(now)
	}
	s.tokens = math.Min(float64(s.o.Burst), s.tokens+now.Sub(s.last).Seconds()*s.o.Rate)
	s.last = now
	allowed := refuse <= 0 && s.tokens >= 1
	if allowed {
		s.tokens--
		s.ok++
	} else {
		s.full++
	}
	s.mu.Unlock()
	if allowed {
		w.WriteHeader(http.StatusOK)
		return
	}
	if refuse <= 0 {
		refuse = s.o.RetryAfter
	}
	if refuse > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(refuse.Seconds()))))
	}
	w.WriteHeader(http.StatusTooManyRequests)
}

// Stats returns how many requests succeeded and how many were refused with 429.
func (s *Server) Stats() (ok, limited int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ok, s.full
}

// Arrivals returns the arrival times of all requests, in order.
func (s *Server) Arrivals() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.arrivals...)
}

// MaxInWindow returns the most arrivals in any window of length d.
func MaxInWindow(arrivals []time.Time, d time.Duration) int {
	best, j := 0, 0
	for i := range arrivals {
		for arrivals[i].Sub(arrivals[j]) >= d {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}
