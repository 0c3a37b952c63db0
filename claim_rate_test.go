package redrive

import (
	"testing"
	"time"
)

// TestStartRateRisesFastFallsSlowly feeds the estimator starts as a busy
// process makes them, a claim's worth at a time, and checks the shape its
// prefetch relies on: a burst after a quiet spell is followed within a few
// tenths of a second, a steady rate in bursts is estimated close to its
// mean rather than its peaks, and a stop is forgotten over about a second.
func TestStartRateRisesFastFallsSlowly(t *testing.T) {
	r := newStartRate(32, 100*time.Millisecond)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var count int64
	next := at
	// step advances d in ticks of the claim loop (tick), starting batch
	// handlers every period: a rate of batch / period.
	step := func(d, tick, period time.Duration, batch int64) float64 {
		var est float64
		if batch == 0 || next.Before(at) {
			next = at
		}
		for end := at.Add(d); at.Before(end); at = at.Add(tick) {
			if batch > 0 && !at.Before(next) {
				count += batch
				next = next.Add(period)
			}
			est = r.update(at, count)
		}
		return est
	}
	// Quiet: no starts for ten seconds.
	if est := step(10*time.Second, 20*time.Millisecond, 0, 0); est != 0 {
		t.Fatalf("quiet: %.0f a second; want 0", est)
	}
	// A burst of 40,000 a second, 2,000 every 50 ms, claim loop every 20 ms.
	const want = 40000.0
	if est := step(300*time.Millisecond, 20*time.Millisecond, 50*time.Millisecond, 2000); est < 0.8*want {
		t.Fatalf("300 ms into a burst: %.0f a second; want at least %.0f", est, 0.8*want)
	}
	// Held for two seconds: near the mean, not at the bursts' peaks.
	lo, hi := want, 0.0
	for range 100 {
		est := step(20*time.Millisecond, 20*time.Millisecond, 50*time.Millisecond, 2000)
		lo, hi = min(lo, est), max(hi, est)
	}
	t.Logf("steady: %.0f – %.0f", lo, hi)
	if lo < 0.75*want || hi > 1.5*want {
		t.Fatalf("steady at %.0f a second: estimates %.0f – %.0f; want within 0.75 – 1.5 of it", want, lo, hi)
	}
	// Stopped: after 300 ms most of the rate is still assumed, after 3 s
	// little.
	if est := step(300*time.Millisecond, 20*time.Millisecond, 0, 0); est < 0.6*want || est > 0.8*want {
		t.Fatalf("300 ms after a stop: %.0f a second; want %.0f – %.0f (a time constant of a second)", est, 0.6*want, 0.8*want)
	}
	if est := step(3*time.Second, 20*time.Millisecond, 0, 0); est > 0.05*want {
		t.Fatalf("3.3 s after a stop: %.0f a second; want under %.0f", est, 0.05*want)
	}
}

// TestStartRateWakes checks the estimate at rest: starts after the first
// claim's that come faster than it says are taken at once, and a burst of
// the workers' worth a second later, as handlers that each take a second
// give, is not.
func TestStartRateWakes(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// feed ticks the claim loop every millisecond for d, batch handlers
	// starting every period, spread over the first 4 ms of it as workers
	// pick a claim's items up (over the whole period when shorter).
	feed := func(r *startRate, d, every time.Duration, batch int64, count *int64) float64 {
		var est float64
		for end := at.Add(d); at.Before(end); at = at.Add(time.Millisecond) {
			spread := min(4, every.Milliseconds())
			if at.UnixMilli()%every.Milliseconds() < spread {
				*count += batch / spread
			}
			est = r.update(at, *count)
		}
		return est
	}
	// 32 workers after a second of quiet, fed 32 items every 2 ms as a
	// claim of the free workers' worth gives: 16,000 a second.
	r := newStartRate(32, 100*time.Millisecond)
	var count int64
	feed(&r, time.Second, time.Hour, 0, &count)
	const want = 16000.0
	if est := feed(&r, 20*time.Millisecond, 2*time.Millisecond, 32, &count); est < 0.8*want || est > 1.5*want {
		t.Fatalf("20 ms into a burst from rest: %.0f a second; want %.0f – %.0f", est, 0.8*want, 1.5*want)
	}
	// Handlers of a second each, started together: 32 a second, in one
	// burst. The estimate must not take the burst for a rate.
	r = newStartRate(32, 100*time.Millisecond)
	count = 0
	feed(&r, time.Second, time.Hour, 0, &count)
	if est := feed(&r, 5*time.Second, time.Second, 32, &count); est > 200 {
		t.Fatalf("32 starts a second in bursts: %.0f a second; want under 200 (a prefetch under the free workers)", est)
	}
}
