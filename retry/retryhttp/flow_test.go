package retryhttp

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive/retry"
)

// connServer is a loopback server that counts the TCP connections it accepts and
// records the time of every request.
type connServer struct {
	URL   string
	conns atomic.Int64
	mu    sync.Mutex
	at    []time.Time
	srv   *http.Server
}

type countListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func newConnServer(t *testing.T, h func(n int, w http.ResponseWriter, r *http.Request)) *connServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &connServer{URL: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.at = append(s.at, time.Now())
		n := len(s.at)
		s.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		h(n, w, r)
	})}
	go func() { _ = s.srv.Serve(countListener{ln, &s.conns}) }()
	t.Cleanup(func() { s.srv.Close() })
	return s
}

func (s *connServer) arrivals() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

// hammer makes workers goroutines send n GETs each through rt and returns how many got
// a 200.
func hammer(t *testing.T, rt http.RoundTripper, url string, workers, n int) int64 {
	t.Helper()
	c := &http.Client{Transport: rt}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				resp, err := c.Get(url)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load()
}

// TestTransportReusesConnections: 32 concurrent callers through a zero Transport, one
// answer in five a 500 with a body that must be drained for the connection to be reused,
// open at most 2 connections per caller; through http.DefaultTransport's pool (2 idle
// connections per host) the same load opens many more.
func TestTransportReusesConnections(t *testing.T) {
	const workers, n = 32, 20
	handler := func(i int, w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond) // the work: keeps the callers' calls overlapping
		if i%10 == 0 {
			w.WriteHeader(500)
			io.WriteString(w, strings.Repeat("e", 8<<10))
			return
		}
		io.WriteString(w, strings.Repeat("x", 8<<10))
	}
	s := newConnServer(t, handler)
	p := fastPolicy(5)
	p.Budget = retry.NewBudget(retry.BudgetOptions{Ratio: 1}) // this test is about connections
	tr := &Transport{Policy: p}
	defer tr.CloseIdleConnections()
	if ok := hammer(t, tr, s.URL, workers, n); ok != workers*n {
		t.Fatalf("%d of %d calls succeeded", ok, workers*n)
	}
	if c := s.conns.Load(); c > 2*workers {
		t.Errorf("zero Transport: %d connections for %d workers, want <= %d", c, workers, 2*workers)
	}
	t.Logf("zero Transport: %d connections for %d workers", s.conns.Load(), workers)

	old := newConnServer(t, handler)
	base := http.DefaultTransport.(*http.Transport).Clone() // what a nil Base used to be
	defer base.CloseIdleConnections()
	hammer(t, &Transport{Base: base, Policy: p, NoFlowControl: true}, old.URL, workers, n)
	if c := old.conns.Load(); c <= 2*workers {
		t.Errorf("http.DefaultTransport's pool: %d connections, expected more than %d (the test does not discriminate)", c, 2*workers)
	}
	t.Logf("http.DefaultTransport's pool: %d connections for %d workers", old.conns.Load(), workers)
}

// TestTransportGateHonoursRetryAfter: once a host answered 429 with Retry-After: 1, no
// call through the Transport reaches it sooner than 1 s later, whichever caller makes it.
func TestTransportGateHonoursRetryAfter(t *testing.T) {
	var limitedAt atomic.Int64
	s := newConnServer(t, func(i int, w http.ResponseWriter, r *http.Request) {
		if i == 1 {
			limitedAt.Store(time.Now().UnixNano())
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			return
		}
		io.WriteString(w, "ok")
	})
	recorded := make(chan struct{})
	var once sync.Once
	tr := &Transport{Policy: retry.Policy{OnRetry: func(retry.Event) { once.Do(func() { close(recorded) }) }}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	first := make(chan int)
	go func() {
		resp, err := c.Get(s.URL)
		if err != nil {
			t.Error(err)
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-recorded // the 429 is known to the Transport: callers from now on wait for the gate
	if ok := hammer(t, tr, s.URL, 4, 2); ok != 8 {
		t.Fatalf("%d of 8 succeeded", ok)
	}
	if code := <-first; code != 200 {
		t.Fatalf("first caller: status %d", code)
	}
	at := s.arrivals()
	limited := time.Unix(0, limitedAt.Load())
	for i, a := range at[1:] {
		if d := a.Sub(limited); d < time.Second {
			t.Errorf("call %d arrived %v after the 429 with Retry-After: 1", i+2, d)
		}
	}
	if len(at) != 10 {
		t.Errorf("%d calls, want 10", len(at))
	}
}

// TestTransport429WithoutRetryAfterBacksOff: 429s without Retry-After in a row close the
// gate for a pause that doubles (100 ms, 200 ms, 400 ms), and the call then succeeds
// without spending attempts.
func TestTransport429WithoutRetryAfterBacksOff(t *testing.T) {
	s := newConnServer(t, func(i int, w http.ResponseWriter, r *http.Request) {
		if i <= 3 {
			w.WriteHeader(429)
			return
		}
		io.WriteString(w, "ok")
	})
	tr := &Transport{Policy: retry.Policy{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond,
		Budget: retry.NewBudget(retry.BudgetOptions{MinPerSecond: 1000})}} // the gate's pause is tested, not the budget
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: a 429 without Retry-After spent the only attempt", resp.StatusCode)
	}
	at := s.arrivals()
	if len(at) != 4 {
		t.Fatalf("%d calls, want 4", len(at))
	}
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		if gap := at[i+1].Sub(at[i]); gap < want {
			t.Errorf("gap %d: %v, want >= %v", i+1, gap, want)
		}
	}
}

// TestTransportOutage: a host that answers 503 for 1.5 s while callers send 50 logical
// requests receives at most 1.1 calls per logical request sent during the outage (first
// calls included), and is called at full speed again soon after it recovers.
func TestTransportOutage(t *testing.T) {
	const outage = 1500 * time.Millisecond
	var start time.Time
	var mu sync.Mutex
	s := newConnServer(t, func(i int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		down := time.Since(start) < outage
		mu.Unlock()
		if down {
			w.WriteHeader(503)
			return
		}
		io.WriteString(w, "ok")
	})
	mu.Lock()
	start = time.Now()
	mu.Unlock()
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	var issued int
	for time.Since(start) < outage-200*time.Millisecond {
		issued++
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		tick := time.NewTimer(25 * time.Millisecond)
		<-tick.C
	}
	wg.Wait()
	var during int
	for _, a := range s.arrivals() {
		if a.Sub(start) < outage {
			during++
		}
	}
	if float64(during) > 1.1*float64(issued) {
		t.Errorf("%d calls during the outage for %d logical requests: %.2f per request, want <= 1.1", during, issued, float64(during)/float64(issued))
	}
	t.Logf("%d calls during the outage for %d logical requests", during, issued)
	// Recovered: a new request succeeds at once.
	t0 := time.Now()
	resp, err := c.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || time.Since(t0) > 2*time.Second {
		t.Errorf("after the outage: status %d in %v", resp.StatusCode, time.Since(t0))
	}
}

// TestFlowPauseDoublesPerRound: the 429s without Retry-After that answer one round of
// calls double the host's pause once: four refused together pause it for 100 ms, not
// 100 ms × 2³.
func TestFlowPauseDoublesPerRound(t *testing.T) {
	f := newFlow()
	ctx := context.Background()
	var ps []retry.Permit
	for range 4 {
		p, _, err := f.acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	begin := time.Now()
	for _, p := range ps {
		f.record(p, false, sigPushback, 0)
	}
	until := f.gate.ClosedUntil(time.Now())
	if until.IsZero() {
		t.Fatal("the gate is open after four 429s")
	}
	if d := until.Sub(begin); d > flowFirstPause+50*time.Millisecond {
		t.Fatalf("paused for %v after one round of 429s, want %v", d, flowFirstPause)
	}
	if f.limitedRun != 1 {
		t.Fatalf("%d rounds counted for one round of 429s", f.limitedRun)
	}
}
