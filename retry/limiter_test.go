package retry

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// limClock is a clock the limiter tests move by hand.
type limClock struct {
	mu sync.Mutex
	t  time.Time
}

func newLimClock() *limClock { return &limClock{t: time.Unix(1_800_000_000, 0)} }
func (c *limClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
func (c *limClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestLimiterNeverFasterThanRate: however many goroutines wait, n calls through a
// limiter of rate r and burst b take at least (n-b)/r.
func TestLimiterNeverFasterThanRate(t *testing.T) {
	const rate, burst, n = 200.0, 5, 100
	l := NewLimiter(LimiterOptions{Rate: rate, Burst: burst, Fixed: true})
	var (
		mu     sync.Mutex
		starts []time.Time
		wg     sync.WaitGroup
	)
	begin := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if len(starts) >= n {
					mu.Unlock()
					return
				}
				mu.Unlock()
				p, err := l.Wait(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				p.Success()
			}
		}()
	}
	wg.Wait()
	got := len(starts)
	min := time.Duration(float64(got-burst) / rate * float64(time.Second))
	var last time.Time
	for _, s := range starts {
		if s.After(last) {
			last = s
		}
	}
	if el := last.Sub(begin); el < min-time.Millisecond {
		t.Fatalf("%d calls in %v: faster than %v/s (at least %v)", got, el, rate, min)
	}
}

// TestLimiterAIMD: push backs lower the rate by the factor once per round of calls,
// never below the floor; successes raise it, never above the ceiling.
func TestLimiterAIMD(t *testing.T) {
	c := newLimClock()
	l := NewLimiter(LimiterOptions{Rate: 100, MinRate: 5, Now: c.now})
	if r := l.Rate(); r != 100 {
		t.Fatalf("starts at %v, want the configured 100", r)
	}
	if l.SlowStart() {
		t.Fatal("a known rate needs no slow start")
	}
	p := Permit{l: l, start: c.now().UnixNano()}
	old := Permit{l: l, start: c.now().UnixNano() - 1}
	c.add(time.Millisecond)
	p.PushBack()
	if r := l.Rate(); math.Abs(r-70) > 1e-9 {
		t.Fatalf("after a push back: %v, want 70", r)
	}
	old.PushBack() // started before the drop: already answered
	if r := l.Rate(); math.Abs(r-70) > 1e-9 {
		t.Fatalf("a second push back of the same round lowered the rate to %v", r)
	}
	for range 30 {
		c.add(time.Millisecond)
		Permit{l: l, start: c.now().UnixNano()}.PushBack()
		c.add(time.Millisecond)
	}
	if r := l.Rate(); r != 5 {
		t.Fatalf("after many push backs: %v, want the floor 5", r)
	}
	// Successes while the pace holds callers back raise the rate: below the last
	// push back's rate by half the gap a second, above it additively, never past 100.
	prev := l.Rate()
	for range 20000 {
		l.reserve(c.now().UnixNano()) // the pace is saturated
		c.add(time.Duration(float64(time.Second) / l.Rate()))
		Permit{l: l, start: c.now().UnixNano()}.Success()
		if r := l.Rate(); r < prev || r > 100 {
			t.Fatalf("rate %v after %v: not monotonic within [5, 100]", r, prev)
		}
		prev = l.Rate()
	}
	if prev != 100 {
		t.Fatalf("rate after many successes: %v, want the ceiling 100", prev)
	}
}

// TestLimiterIdleRateDoesNotGrow: successes while nobody waits for the pace say
// nothing about what the dependency takes, so they do not raise the rate.
func TestLimiterIdleRateDoesNotGrow(t *testing.T) {
	c := newLimClock()
	l := NewLimiter(LimiterOptions{Rate: 100, Now: c.now})
	c.add(time.Millisecond)
	Permit{l: l, start: c.now().UnixNano()}.PushBack()
	c.add(2 * time.Second)
	for range 100 {
		c.add(100 * time.Millisecond)
		Permit{l: l, start: c.now().UnixNano()}.Success()
	}
	if r := l.Rate(); r != 70 {
		t.Fatalf("rate %v after idle successes, want 70", r)
	}
}

// TestLimiterSlowStart: an unknown limit starts with a window of 4 calls in flight that
// each success widens by one; the first push back ends slow start at the rate of the
// last second's successes times the decrease factor. (The ramp by time, which the test
// turns off, is TestLimiterSlowStartRamp's.)
func TestLimiterSlowStart(t *testing.T) {
	c := newLimClock()
	l := NewLimiter(LimiterOptions{InitialRate: -1, Now: c.now})
	if !l.SlowStart() || !math.IsInf(l.Rate(), 1) {
		t.Fatalf("zero options: slow start %v rate %v", l.SlowStart(), l.Rate())
	}
	ctx := context.Background()
	var ps []Permit
	for range 4 {
		p, err := l.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err := l.Wait(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a fifth call entered a window of 4: %v", err)
	}
	got := make(chan Permit, 2)
	for range 2 {
		go func() {
			p, err := l.Wait(ctx)
			if err == nil {
				got <- p
			}
		}()
	}
	ps[0].Success() // window 5, 3 in flight: both waiters enter
	ps = append(ps[1:], <-got, <-got)
	// 50 successes over the next second, then a push back.
	for i := range 50 {
		c.add(20 * time.Millisecond)
		if i < len(ps) {
			ps[i].Success()
			continue
		}
		p, err := l.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.Success()
	}
	p, err := l.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.PushBack()
	if l.SlowStart() {
		t.Fatal("still in slow start after a push back")
	}
	if r := l.Rate(); r < 0.7*45 || r > 0.7*51 {
		t.Fatalf("slow start ended at %v/s, want 0.7 × about 50", r)
	}
}

// TestLimiterPauseUntil: after a pause nothing starts before its end.
func TestLimiterPauseUntil(t *testing.T) {
	l := NewLimiter(LimiterOptions{Rate: 1000, Burst: 10})
	until := time.Now().Add(150 * time.Millisecond)
	l.PauseUntil(until)
	for range 3 {
		p, err := l.Wait(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if now := time.Now(); now.Before(until) {
			t.Fatalf("a call started %v before the pause's end", until.Sub(now))
		}
		p.Done()
	}
}

func TestGate(t *testing.T) {
	var g Gate
	now := time.Now()
	if !g.ClosedUntil(now).IsZero() {
		t.Fatal("the zero Gate is closed")
	}
	until := now.Add(100 * time.Millisecond)
	if !g.Close(until) {
		t.Fatal("Close did not close")
	}
	if g.Close(now.Add(time.Millisecond)) {
		t.Fatal("an earlier Close moved the reopening forward")
	}
	if got := g.ClosedUntil(now); !got.Equal(until) {
		t.Fatalf("closed until %v, want %v", got, until)
	}
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(until) {
		t.Fatal("Wait returned before the gate opened")
	}
	g.Close(time.Now().Add(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a closed gate: %v", err)
	}
	g.Open()
	if !g.ClosedUntil(time.Now()).IsZero() {
		t.Fatal("Open did not open")
	}
}

// TestLimiterAgainstTokenBucket drives a real HTTP server on loopback that enforces a
// token bucket (50/s, burst 10, 429 when empty) through a zero-options Limiter from 8
// goroutines for 9 s: slow start's ramp (10/s, doubling every 2.5 s) reaches the limit
// after about 6 s without a burst, and after its first push back the limiter keeps near
// the rate, so 429s stay a small share of the calls.
func TestLimiterAgainstTokenBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("9 s")
	}
	const rate, burst = 50.0, 10.0
	var (
		mu       sync.Mutex
		tokens   = burst
		last     = time.Now()
		arrivals []time.Time
		oks      []time.Time
		first429 time.Time
		limited  int
	)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		now := time.Now()
		arrivals = append(arrivals, now)
		tokens = math.Min(burst, tokens+now.Sub(last).Seconds()*rate)
		last = now
		allowed := tokens >= 1
		if allowed {
			tokens--
			oks = append(oks, now)
		} else {
			limited++
			if first429.IsZero() {
				first429 = now
			}
		}
		mu.Unlock()
		if !allowed {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	l := NewLimiter(LimiterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
	defer cancel()
	begin := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				p, err := l.Wait(ctx)
				if err != nil {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					p.Done()
					return
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					p.PushBack()
				} else {
					p.Success()
				}
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	mu.Lock()
	defer mu.Unlock()
	peak := 0
	for i, a := range arrivals {
		n := 0
		for _, b := range arrivals[i:] {
			if b.Sub(a) >= 100*time.Millisecond {
				break
			}
			n++
		}
		peak = max(peak, n)
	}
	after := 0
	for _, at := range oks {
		if !first429.IsZero() && !at.Before(first429) {
			after++
		}
	}
	t.Logf("succeeded %d (%d after the first 429, %.1f s in), 429 %d, busiest 100 ms %d calls, final rate %.1f/s",
		len(oks), after, first429.Sub(begin).Seconds(), limited, peak, l.Rate())
	if first429.IsZero() {
		t.Fatalf("no 429 in 9 s: %d calls succeeded, slow start never reached 50/s", len(oks))
	}
	// After its first push back the limiter keeps near 50/s. A limiter stuck near its
	// floor (1/s) would deliver a handful; the bound leaves room for a machine so busy
	// that the callers themselves fall behind.
	if span := end.Sub(first429).Seconds(); span > 1 && float64(after) < 0.4*rate*span {
		t.Errorf("%d calls succeeded in the %.1f s after the first 429: below 0.4 × 50/s", after, span)
	}
	if limited > len(oks)/5 {
		t.Errorf("%d calls refused for %d that succeeded", limited, len(oks))
	}
	// Twice the 2 × C line (10 calls): late timers on a loaded machine bunch calls.
	if peak > 20 {
		t.Errorf("%d calls in 100 ms against a limit of 50/s", peak)
	}
}

// TestLimiterCycleFindsRate: slow start's first estimate counts a token bucket's burst
// as rate (50 successes in 100 ms: 350/s after the cut, against a limit of 50/s). The
// next push back, a Retry-After of 1 s later, takes what the bucket delivered over that
// cycle instead: about 50/s, so the cycles after it stay near the limit instead of
// sending a burst above it after every Retry-After.
func TestLimiterCycleFindsRate(t *testing.T) {
	const rate, burst = 50.0, 50.0
	c := newLimClock()
	l := NewLimiter(LimiterOptions{Now: c.now})
	tokens, last := burst, c.now()
	l.first.Store(last.UnixNano())
	call := func() bool {
		now := c.now()
		tokens = math.Min(burst, tokens+now.Sub(last).Seconds()*rate)
		last = now
		p := Permit{l: l, start: now.UnixNano(), slow: l.SlowStart()}
		if tokens < 1 {
			p.PushBack()
			return false
		}
		tokens--
		if p.slow {
			l.inflight.Add(1)
		}
		p.Success()
		return true
	}
	for call() {
		c.add(2 * time.Millisecond)
	}
	if l.SlowStart() || l.Rate() < 5*rate {
		t.Fatalf("slow start ended at %.0f/s; the test wants an estimate inflated by the burst", l.Rate())
	}
	var rates []float64
	for range 6 {
		c.add(time.Second) // the Retry-After
		end := c.now().Add(5 * time.Second)
		for call() && c.now().Before(end) {
			c.add(time.Duration(float64(time.Second) / l.Rate()))
		}
		rates = append(rates, l.Rate())
	}
	t.Logf("rates after each push back: %.0f", rates)
	for i, r := range rates {
		if r > 1.2*rate {
			t.Fatalf("push back %d left the rate at %.0f/s, above the limit of %.0f/s: %.0f", i+2, r, rate, rates)
		}
		if r < 0.5*rate {
			t.Fatalf("push back %d left the rate at %.0f/s, below half the limit: %.0f", i+2, r, rates)
		}
	}
}

// TestLimiterSlowStartRamp: slow start spaces calls evenly at InitialRate (default 10/s)
// and doubles that rate with every rampDoubling of calls that keep to it; calls that come
// slower than the ramp (an idle limiter) do not raise it.
func TestLimiterSlowStartRamp(t *testing.T) {
	c := newLimClock()
	l := NewLimiter(LimiterOptions{Now: c.now})
	rampRate := func() float64 { return math.Float64frombits(l.ramp.Load()) }
	if r := rampRate(); r != DefaultInitialRate {
		t.Fatalf("zero options: ramp starts at %v/s, want %v/s", r, DefaultInitialRate)
	}
	// Ten callers at once: one slot each, about a tenth of a second apart (each raises
	// the rate a little, as it waits for its slot), none together.
	var prev int64 = -1
	for i := range 10 {
		d := rampDelay(l, c.now().UnixNano())
		if i == 0 && d != 0 {
			t.Fatalf("the first call waits %v", time.Duration(d))
		}
		if i > 0 && (d-prev < int64(75*time.Millisecond) || d-prev > int64(100*time.Millisecond)) {
			t.Fatalf("call %d starts %v after the one before, want about 100 ms at 10/s", i, time.Duration(d-prev))
		}
		prev = d
	}
	// Callers that always wait for their slot: the rate doubles every rampDoubling.
	// (The slots run ahead of the clock by the ten reserved above.)
	tat0, r0 := l.tat.Load(), rampRate()
	for l.tat.Load()-tat0 < int64(2*rampDoubling) {
		c.add(time.Duration(rampDelay(l, c.now().UnixNano())))
	}
	if got, want := rampRate(), 4*r0; got < 0.9*want || got > 1.1*want {
		t.Fatalf("after 2 × %v of calls at the ramp: %.1f/s, want about %.1f/s", rampDoubling, got, want)
	}
	// A call every 10 s, far slower than the ramp, does not raise it.
	r1 := rampRate()
	for range 10 {
		c.add(10 * time.Second)
		if d := rampDelay(l, c.now().UnixNano()); d != 0 {
			t.Fatalf("an idle limiter made a call wait %v", time.Duration(d))
		}
	}
	if got := rampRate(); got != r1 {
		t.Fatalf("idle calls raised the ramp from %.1f/s to %.1f/s", r1, got)
	}
	// A negative InitialRate: slow start by the window alone.
	off := NewLimiter(LimiterOptions{InitialRate: -1, Now: c.now})
	for range 2 {
		if d := rampDelay(off, c.now().UnixNano()); d != 0 {
			t.Fatalf("a negative InitialRate still paces slow start: a call waits %v", time.Duration(d))
		}
	}
}

// TestLimiterRampAgainstBucket: against token buckets the limiter knows nothing about,
// whose burst is up to a second of their rate C, slow start's ramp sends no 100 ms window
// above 2 C before the bucket runs dry (where a window clocked by millisecond round trips
// alone sent 6 – 14 C). A bucket whose burst is a second of its rate is the worst case of
// these: the ramp spends that burst's excess over C while it rises.
func TestLimiterRampAgainstBucket(t *testing.T) {
	for _, tc := range []struct{ rate, burst float64 }{{50, 50}, {100, 10}, {20, 20}, {1000, 1000}, {200, 20}} {
		c := newLimClock()
		l := NewLimiter(LimiterOptions{Now: c.now})
		tokens, last, begin := tc.burst, c.now(), c.now()
		windows := map[int64]int{}
		calls := 0
		for {
			c.add(time.Duration(rampDelay(l, c.now().UnixNano())))
			now := c.now()
			windows[int64(now.Sub(begin)/(100*time.Millisecond))]++
			calls++
			tokens = math.Min(tc.burst, tokens+now.Sub(last).Seconds()*tc.rate)
			last = now
			if tokens < 1 {
				break
			}
			tokens--
		}
		peak := 0
		for _, n := range windows {
			peak = max(peak, n)
		}
		t.Logf("C = %v/s, burst %v: dry after %v and %d calls, ramp at %.2f C, busiest 100 ms %.1f C",
			tc.rate, tc.burst, c.now().Sub(begin).Round(time.Millisecond), calls, math.Float64frombits(l.ramp.Load())/tc.rate, float64(peak)/(tc.rate/10))
		if float64(peak) > 2*tc.rate/10 {
			t.Errorf("C = %v/s, burst %v: %d calls in one 100 ms window, above 2 C", tc.rate, tc.burst, peak)
		}
	}
}

// TestLimiterLateWakersDoNotStartTogether: callers sleeping on their slots of the pace
// that all wake at once, late (the process stalled past their slots), start one at a
// time: one goes, the others take fresh slots an interval apart, instead of all
// starting in the same instant above the rate.
func TestLimiterLateWakersDoNotStartTogether(t *testing.T) {
	iv := 20 * time.Millisecond // 50/s
	c := newLimClock()
	l := NewLimiter(LimiterOptions{Rate: 50, Fixed: true, Now: c.now})
	starts := stallWakers(t, l, c, 10)
	for i := 2; i < len(starts); i++ { // starts[0] is the first call, before the stall
		if gap := time.Duration(starts[i] - starts[i-1]); gap < iv {
			t.Errorf("calls %d and %d started %v apart, less than the interval %v", i-1, i, gap, iv)
		}
	}
}

// TestLimiterLateWakersInSlowStart is TestLimiterLateWakersDoNotStartTogether for the
// slots of slow start's ramp, which a stall releases together just the same; and the
// fresh slots taken after it do not grow the ramp.
func TestLimiterLateWakersInSlowStart(t *testing.T) {
	c := newLimClock()
	l := NewLimiter(LimiterOptions{InitialRate: 50, InitialWindow: 100, Now: c.now})
	ramp := func() float64 { return math.Float64frombits(l.ramp.Load()) }
	starts := stallWakers(t, l, c, 10)
	if !l.SlowStart() {
		t.Fatal("the limiter left slow start")
	}
	// Nine calls kept to the ramp before the stall; the re-reserved slots added none.
	if got, want := ramp(), 50*math.Exp2(9*0.02/rampDoubling.Seconds()); math.Abs(got-want) > 0.5 {
		t.Errorf("ramp at %.2f/s after the stall, want %.2f/s (grown by the nine first reservations only)", got, want)
	}
	minIv := time.Duration(float64(time.Second) / ramp())
	for i := 2; i < len(starts); i++ {
		if gap := time.Duration(starts[i] - starts[i-1]); gap < minIv {
			t.Errorf("calls %d and %d started %v apart, less than the ramp's interval %v", i-1, i, gap, minIv)
		}
	}
}

// stallWakers starts n callers of l, of which one starts at once and the others sleep
// on their slots; stalls the clock by half a second, past every slot; wakes all the
// sleepers together, checks that exactly one of them starts then, and from there on
// wakes each sleeper on time. It returns the calls' starts in order.
func stallWakers(t *testing.T, l *Limiter, c *limClock, n int) []int64 {
	t.Helper()
	type event struct {
		start int64         // a Wait returned a permit that started then
		wake  time.Time     // or a Wait sleeps until wake on the limiter's clock
		go_   chan struct{} // closed to wake it
	}
	events := make(chan event)
	l.sleepHook = func(ctx context.Context, d time.Duration) error {
		ch := make(chan struct{})
		events <- event{wake: c.now().Add(d), go_: ch}
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range n {
		go func() {
			p, err := l.Wait(ctx)
			if err != nil {
				return
			}
			events <- event{start: p.start}
		}()
	}
	var starts []int64
	var sleeping []event
	// collect waits until k callers have reported, each that it started or sleeps.
	collect := func(k int) {
		for range k {
			select {
			case ev := <-events:
				if ev.go_ != nil {
					sleeping = append(sleeping, ev)
				} else {
					starts = append(starts, ev.start)
				}
			case <-ctx.Done():
				t.Fatalf("callers did not report: %d started, %d sleeping", len(starts), len(sleeping))
			}
		}
	}
	collect(n)
	if len(starts) != 1 || len(sleeping) != n-1 {
		t.Fatalf("%d started and %d sleep at first, want 1 and %d", len(starts), len(sleeping), n-1)
	}
	// The process stalls for half a second, past every slot, and then the timers of
	// all the sleepers fire together.
	c.add(500 * time.Millisecond)
	stallEnd := c.now().UnixNano()
	woken := sleeping
	sleeping = nil
	for _, s := range woken {
		close(s.go_)
	}
	collect(len(woken))
	together := 0
	for _, s := range starts {
		if s == stallEnd {
			together++
		}
	}
	if together != 1 {
		t.Fatalf("%d calls started together at the end of the stall, want 1", together)
	}
	// From there on, every timer fires on time: the others start an interval apart.
	for len(starts) < n {
		if len(sleeping) == 0 {
			t.Fatalf("%d started and nobody sleeps", len(starts))
		}
		next := sleeping[0].wake
		for _, s := range sleeping {
			if s.wake.Before(next) {
				next = s.wake
			}
		}
		c.add(next.Sub(c.now()))
		var due []event
		rest := sleeping[:0]
		for _, s := range sleeping {
			if !s.wake.After(next) {
				due = append(due, s)
			} else {
				rest = append(rest, s)
			}
		}
		sleeping = rest
		for _, s := range due {
			close(s.go_)
		}
		collect(len(due))
	}
	slices.Sort(starts)
	return starts
}

// rampDelay takes the next slot of l's ramp as a call that keeps to it does and
// returns how long to wait for it.
func rampDelay(l *Limiter, now int64) int64 {
	d, _ := l.reserveRamp(now, true)
	return d
}

// TestLimiterWindowWakesEveryWaiter: callers that wait for room in slow
// start's window are all let in as calls end, though an ending call
// wakes anyone only when someone waits (a lost wake-up would leave a
// caller waiting for good).
func TestLimiterWindowWakesEveryWaiter(t *testing.T) {
	t.Parallel()
	const trials, callers, calls = 1000, 8, 5
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range trials {
			l := NewLimiter(LimiterOptions{InitialRate: -1, InitialWindow: 1})
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for range calls {
						p, err := l.Wait(context.Background())
						if err != nil {
							t.Error(err)
							return
						}
						p.Done()
					}
				})
			}
			wg.Wait()
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("callers still waiting for the window after 2 minutes")
	}
}
