package loadbench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive/internal/tokenbucket"
)

// ServerOptions configure a Server. Zero values take the stated defaults.
type ServerOptions struct {
	// Rate is the token bucket's refill rate in requests per second. Default 0: no limit.
	Rate float64
	// Burst is the token bucket's size. Default: Rate.
	Burst int
	// RetryAfter is sent in whole seconds (rounded up) with each 429. Default 0: no
	// Retry-After header.
	RetryAfter time.Duration
	// Outage, when set, is asked with the time since the server started; while it returns
	// true every request is answered 503 without Retry-After at once. Default nil: no outage.
	Outage func(elapsed time.Duration) bool
	// Latency is how long a request that is let through takes. Default 0.
	Latency time.Duration
	// Window is the width of the counting windows. Default 100 ms.
	Window time.Duration
}

// Server is a loopback HTTP server that answers POST and GET on every path with a small
// JSON body, limited by a token bucket, and counts what it receives per window and every
// TCP connection it accepts. The X-Item header of a request, when present, names its
// logical request.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:PORT.
	URL string
	// Rec counts arrivals and answers.
	Rec *Recorder

	opts   ServerOptions
	bucket *tokenbucket.Bucket
	conns  atomic.Int64
	srv    *http.Server
	done   chan struct{}
}

// StartServer listens on a free loopback port and serves until Close.
func StartServer(o ServerOptions) (*Server, error) {
	if o.Window <= 0 {
		o.Window = 100 * time.Millisecond
	}
	if o.Burst <= 0 {
		o.Burst = int(o.Rate)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("loadbench: listen: %w", err)
	}
	now := time.Now()
	s := &Server{URL: "http://" + ln.Addr().String(), Rec: NewRecorder(now, o.Window), opts: o, done: make(chan struct{})}
	if o.Rate > 0 {
		s.bucket = tokenbucket.New(o.Rate, o.Burst, now)
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(&countingListener{Listener: ln, n: &s.conns})
	}()
	return s, nil
}

// Conns returns how many TCP connections the server accepted.
func (s *Server) Conns() int { return int(s.conns.Load()) }

// Close stops the server and closes its connections.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	return err
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.Rec.Arrive(now, r.Header.Get("X-Item"))
	if sent, ok := sentAt(r.Header); ok {
		s.Rec.Sent(now, sent)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	status := s.decide(now, w)
	if status == http.StatusOK && s.opts.Latency > 0 {
		t := time.NewTimer(s.opts.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	s.Rec.Answer(time.Now(), status)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	switch status {
	case http.StatusOK:
		_, _ = io.WriteString(w, `{"completion":"ok"}`+"\n")
	default:
		_, _ = fmt.Fprintf(w, `{"error":%q}`+"\n", http.StatusText(status))
	}
}

func (s *Server) decide(now time.Time, w http.ResponseWriter) int {
	if s.opts.Outage != nil && s.opts.Outage(now.Sub(s.Rec.Start)) {
		return http.StatusServiceUnavailable
	}
	if s.bucket == nil {
		return http.StatusOK
	}
	if ok, _ := s.bucket.Take(now); ok {
		return http.StatusOK
	}
	if s.opts.RetryAfter > 0 {
		secs := int64((s.opts.RetryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	return http.StatusTooManyRequests
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// wait sleeps for d or until ctx is done, and reports whether it slept the whole time.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
