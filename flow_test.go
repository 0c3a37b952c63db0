package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/limitserver"
	"github.com/redrive/redrive/retry"
)

// callBucket returns a handler that calls the token-bucket server: 200 succeeds,
// 429 is rate limited (after its Retry-After, if any), 503 is a retryable failure.
func callBucket(client *http.Client, url string, calls *atomic.Int64) redrive.Handler {
	return func(ctx context.Context, it *redrive.Item) ([]byte, error) {
		if calls != nil {
			calls.Add(1)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, retry.Final(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return it.Payload, nil
		case http.StatusTooManyRequests:
			s, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			return nil, retry.RateLimited(errors.New("429 too many requests"), time.Duration(s)*time.Second)
		default:
			return nil, fmt.Errorf("status %d", resp.StatusCode)
		}
	}
}

func loopbackClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}, Timeout: 10 * time.Second}
}

func startBucket(t *testing.T, o limitserver.Options) *limitserver.Server {
	t.Helper()
	srv, err := limitserver.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// flowConfig is testConfig with 16 workers, four times what the tests' rates
// need, so that nothing but flow control holds the calls back.
func flowConfig(rec *recorder) redrive.Config {
	cfg := testConfig(rec)
	cfg.Workers = 16
	return cfg
}

// TestFlowDrainsAtUnknownLimit: a stage with no options drains 400 items through a
// token bucket of 100/s (burst 10, Retry-After 1 s) that it knows nothing about:
// nothing dies, no item spends an attempt, and few calls are refused, where the
// engine without flow control had 2/3 of its items dead and 97 % of calls refused.
func TestFlowDrainsAtUnknownLimit(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		srv := startBucket(t, limitserver.Options{Rate: 100, Burst: 10, RetryAfter: time.Second})
		p := redrive.Pipeline{Name: "drain", Stages: []redrive.Stage{{Name: "api", Handle: callBucket(loopbackClient(16), srv.URL, nil)}}}
		c := startClient(t, s, flowConfig(nil), p)
		const n = 400
		run, err := c.StartRun(context.Background(), "drain", items(n), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		r := wait(t, c, run)
		took := time.Since(begin)
		ok, limited := srv.Stats()
		peak := limitserver.MaxInWindow(srv.Arrivals(), 100*time.Millisecond)
		t.Logf("%d items in %v: %d calls succeeded, %d refused (%.1f %%), peak %d calls in 100 ms; flows %+v",
			n, took.Round(time.Millisecond), ok, limited, 100*float64(limited)/float64(ok+limited), peak, c.FlowStates())
		if r.Counts.Succeeded != n || r.Counts.Dead != 0 {
			t.Fatalf("run %s %+v", r.Status, r.Counts)
		}
		if limited > (ok+limited)/10 {
			t.Errorf("%d of %d calls refused: the stage did not find the limit", limited, ok+limited)
		}
		assertNoRetries(t, s, run.ID)
	})
}

// assertNoRetries checks that no item of the run spent an attempt: every attempt
// is a success or a rate-limited wait.
func assertNoRetries(t *testing.T, s redrive.Store, runID int64) {
	t.Helper()
	its, err := s.ListItems(context.Background(), redrive.ItemFilter{RunID: runID, Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range its {
		atts, err := s.Attempts(context.Background(), it.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range atts {
			if a.Outcome != redrive.OutcomeSucceeded && a.Outcome != redrive.OutcomeRateLimited {
				t.Fatalf("item %d: attempt %+v spent an attempt", it.ID, a)
			}
		}
	}
}

// TestFlowConfiguredRateHolds: with RateLimit.Rate set, calls start at that rate and
// never faster, however many items are due and workers idle: in every window of a
// second the server sees at most the rate plus the burst.
func TestFlowConfiguredRateHolds(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		const rate = 40
		srv := startBucket(t, limitserver.Options{Rate: 10000, Burst: 10000})
		p := redrive.Pipeline{Name: "paced", Stages: []redrive.Stage{{Name: "api", RateLimit: redrive.RateLimit{Rate: rate},
			Handle: callBucket(loopbackClient(16), srv.URL, nil)}}}
		c := startClient(t, s, flowConfig(nil), p)
		const n = 100
		run, err := c.StartRun(context.Background(), "paced", items(n), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Counts.Succeeded != n {
			t.Fatalf("run %s %+v", r.Status, r.Counts)
		}
		arr := srv.Arrivals()
		perSecond := limitserver.MaxInWindow(arr, time.Second)
		per100 := limitserver.MaxInWindow(arr, 100*time.Millisecond)
		span := arr[len(arr)-1].Sub(arr[0])
		t.Logf("%d calls over %v; at most %d in a second, %d in 100 ms", len(arr), span, perSecond, per100)
		// GCRA: n calls take at least (n-burst)/rate; a window of 1 s holds at most
		// rate + burst calls. The shared bucket lets a process hold a tenth of a
		// second's tokens (4) ahead.
		if perSecond > rate+1+4 {
			t.Fatalf("%d calls in one second at a rate of %d/s", perSecond, rate)
		}
		if per100 > 2*rate/10+1 {
			t.Fatalf("%d calls in 100 ms at a rate of %d/s: a burst", per100, rate)
		}
		if min := time.Duration(float64(n-5) / rate * float64(time.Second)); span < min {
			t.Fatalf("%d calls in %v: faster than %d/s", n, span, rate)
		}
	})
}

// TestFlowGateIsStageWide: while the dependency refuses every call with
// Retry-After: 1 (for 2.5 s), the stage's gate stops every call until the time it
// asked, the items wait without spending attempts or their allowance (one
// rate-limited wait allowed, three spells of refusals), and none dies.
func TestFlowGateIsStageWide(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		srv := startBucket(t, limitserver.Options{Rate: 10000, Burst: 10000})
		var closedUntil atomic.Int64
		closedUntil.Store(time.Now().Add(2500 * time.Millisecond).UnixNano())
		srv.SetRefuse(func(now time.Time) time.Duration {
			if now.UnixNano() < closedUntil.Load() {
				return time.Second
			}
			return 0
		})
		rec := &recorder{}
		pol := fast(2)
		pol.MaxRateLimitWaits = 1
		p := redrive.Pipeline{Name: "gated", Stages: []redrive.Stage{{Name: "api", Policy: pol,
			Handle: callBucket(loopbackClient(16), srv.URL, nil)}}}
		c := startClient(t, s, flowConfig(rec), p)
		const n = 50
		run, err := c.StartRun(context.Background(), "gated", items(n), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Counts.Succeeded != n || r.Counts.Dead != 0 {
			t.Fatalf("a stage-wide limit killed items: %s %+v", r.Status, r.Counts)
		}
		assertNoRetries(t, s, run.ID)
		// After each refusal, nothing but calls already under way may arrive
		// before its Retry-After has passed.
		arr := srv.Arrivals()
		var refusals []time.Time
		for _, a := range arr {
			if a.UnixNano() < closedUntil.Load() {
				refusals = append(refusals, a)
			}
		}
		if len(refusals) == 0 {
			t.Fatal("no call was refused: the test proved nothing")
		}
		first := refusals[0]
		early := 0
		for _, a := range arr {
			if a.After(first.Add(100*time.Millisecond)) && a.Before(first.Add(time.Second)) {
				early++
			}
		}
		t.Logf("%d calls, %d refused; %d arrived within the first Retry-After", len(arr), len(refusals), early)
		if early > 0 {
			t.Fatalf("%d calls arrived before the Retry-After of the first refusal had passed", early)
		}
		if len(refusals) > 3*16 {
			t.Fatalf("%d refused calls for three spells: the gate let calls through", len(refusals))
		}
	})
}

// TestFlowOutageKillsNoItem: the dependency answers 503 without Retry-After for 2 s
// while 600 items drain at the default policy (3 attempts) and default flow
// control: no item dies, the outage costs few calls (the breaker pauses the stage
// and probes), and the stage drains after it.
func TestFlowOutageKillsNoItem(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		srv := startBucket(t, limitserver.Options{Rate: 10000, Burst: 10000})
		var calls, downFrom, downUntil atomic.Int64
		srv.SetDown(func(now time.Time) bool {
			from := downFrom.Load()
			return from != 0 && now.UnixNano() >= from && now.UnixNano() < downUntil.Load()
		})
		call := callBucket(loopbackClient(16), srv.URL, &calls)
		p := redrive.Pipeline{Name: "outage", Stages: []redrive.Stage{{Name: "api", Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			if calls.Load() == 100 {
				now := time.Now()
				if downFrom.CompareAndSwap(0, now.UnixNano()) {
					downUntil.Store(now.Add(2 * time.Second).UnixNano())
				}
			}
			return call(ctx, it)
		}}}}
		c := startClient(t, s, flowConfig(nil), p)
		const n = 600
		run, err := c.StartRun(context.Background(), "outage", items(n), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Counts.Succeeded != n || r.Counts.Dead != 0 {
			t.Fatalf("the outage killed items: %s %+v", r.Status, r.Counts)
		}
		during := 0
		for _, a := range srv.Arrivals() {
			if a.UnixNano() >= downFrom.Load() && a.UnixNano() < downUntil.Load() {
				during++
			}
		}
		t.Logf("%d calls for %d items; %d during the 2 s outage", calls.Load(), n, during)
		if downFrom.Load() == 0 {
			t.Fatal("the outage never began")
		}
		// The breaker opens after 20 failures in a row. Calls under way when
		// the outage began may succeed after some failures and restart the
		// count (at most 16, one per worker), up to 16 calls were under way
		// when it opened, then one probe a second. Without the pause, the 16
		// workers would try every remaining item within the 2 s (500 calls).
		if during > 20+16+16+4 {
			t.Fatalf("%d calls during a 2 s outage: the stage did not pause", during)
		}
	})
}

// TestRetryNeverSoonerThanRetryAfter: once an item's rate-limited waits are spent,
// its rate-limited failures count as attempts, and still no call goes out before the
// Retry-After, whatever the policy's backoff says (here 1-5 ms against 60 ms).
func TestRetryNeverSoonerThanRetryAfter(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		pol := fast(3)
		pol.MaxRateLimitWaits = 1
		// MaxLimited of 1 ms makes the waits the item's own; MinRate keeps the
		// pace out of the way.
		p := redrive.Pipeline{Name: "ra", Stages: []redrive.Stage{{Name: "api", Policy: pol,
			RateLimit: redrive.RateLimit{MaxLimited: time.Millisecond, MinRate: 1000},
			Handle: func(context.Context, *redrive.Item) ([]byte, error) {
				return nil, retry.RateLimited(errors.New("429 too many requests"), 60*time.Millisecond)
			}}}}
		c := startClient(t, s, testConfig(nil), p)
		run, err := c.StartRun(context.Background(), "ra", items(1), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Counts.Dead != 1 {
			t.Fatalf("run %+v", r.Counts)
		}
		its, _ := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID})
		atts, err := s.Attempts(context.Background(), its[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		retries := 0
		for i, a := range atts {
			if a.Outcome == redrive.OutcomeRetry {
				retries++
			}
			if a.Outcome != redrive.OutcomeDead && a.Delay < 60*time.Millisecond {
				t.Fatalf("attempt %d (%s) scheduled the next call after %v, before the Retry-After of 60ms", i+1, a.Outcome, a.Delay)
			}
			if i > 0 && a.StartedAt.Sub(atts[i-1].FinishedAt) < 60*time.Millisecond {
				t.Fatalf("attempt %d started %v after the previous one asked for 60ms", i+1, a.StartedAt.Sub(atts[i-1].FinishedAt))
			}
		}
		if retries == 0 {
			t.Fatalf("no rate-limited failure counted as an attempt: %+v", atts)
		}
	})
}

// TestDurableRetriesHonourBudget: a stage's Policy.Budget bounds its durable retries:
// a retry the budget refuses is not dropped but scheduled no sooner than MaxDelay,
// so an outage's retries are spread out. 40 items that each fail once against a
// budget of 10 % with no floor: most retries wait the 300 ms MaxDelay instead of the
// 1 ms backoff, and every item still succeeds.
func TestDurableRetriesHonourBudget(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var failed sync.Map
		pol := retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 300 * time.Millisecond, JitterMode: retry.JitterNone,
			Budget: retry.NewBudget(retry.BudgetOptions{Ratio: 0.1, MinPerSecond: -1})}
		p := redrive.Pipeline{Name: "budget", Stages: []redrive.Stage{{Name: "api", Policy: pol,
			Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				if _, again := failed.LoadOrStore(it.ID, true); !again {
					return nil, errors.New("503 service unavailable")
				}
				return it.Payload, nil
			}}}}
		c := startClient(t, s, testConfig(nil), p)
		const n = 40
		run, err := c.StartRun(context.Background(), "budget", items(n), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Counts.Succeeded != n {
			t.Fatalf("run %s %+v", r.Status, r.Counts)
		}
		its, _ := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID, Limit: n})
		refused := 0
		for _, it := range its {
			atts, _ := s.Attempts(context.Background(), it.ID)
			if len(atts) > 0 && atts[0].Outcome == redrive.OutcomeRetry && atts[0].Delay >= 300*time.Millisecond {
				refused++
			}
		}
		// 40 requests earn 4 retries of credit (plus at most 100 ms of saved
		// credit): at least 30 of the 40 retries are refused and spread.
		if refused < 30 {
			t.Fatalf("%d of %d retries waited for the budget, want at least 30", refused, n)
		}
	})
}

// TestFlowOutageRecoversWithinSeconds: once a dependency is back from an outage, the
// stage works at its earlier rate again within about a second, not at its breaker's
// next backed-off probe (a 4 s outage used to cost 3 s more: probes 1, 3 and 7 s after
// the breaker opened). Measured on the handler's successes, from the end of the outage.
func TestFlowOutageRecoversWithinSeconds(t *testing.T) {
	s := openStore(t)
	srv := startBucket(t, limitserver.Options{Rate: 10000, Burst: 10000})
	const (
		n       = 1500
		outage  = 4 * time.Second
		latency = 50 * time.Millisecond // 8 workers: 160 calls/s at most
		bound   = 2 * time.Second
	)
	var (
		calls              atomic.Int64
		downFrom, downTill atomic.Int64
		mu                 sync.Mutex
		oks                []time.Time
	)
	srv.SetDown(func(now time.Time) bool {
		from := downFrom.Load()
		return from != 0 && now.UnixNano() >= from && now.UnixNano() < downTill.Load()
	})
	call := callBucket(loopbackClient(16), srv.URL, &calls)
	p := redrive.Pipeline{Name: "recover", Stages: []redrive.Stage{{Name: "api", Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
		out, err := call(ctx, it)
		if err != nil {
			return out, err
		}
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		now := time.Now()
		mu.Lock()
		oks = append(oks, now)
		if len(oks) == 300 {
			// Enough successes to know the rate: the outage begins.
			downFrom.Store(now.UnixNano())
			downTill.Store(now.Add(outage).UnixNano())
		}
		mu.Unlock()
		return out, nil
	}}}}
	cfg := testConfig(nil)
	cfg.Workers = 8
	c := startClient(t, s, cfg, p)
	run, err := c.StartRun(context.Background(), "recover", items(n), redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := wait(t, c, run)
	if r.Counts.Succeeded != n || r.Counts.Dead != 0 {
		t.Fatalf("the outage killed items: %s %+v", r.Status, r.Counts)
	}
	from, till := time.Unix(0, downFrom.Load()), time.Unix(0, downTill.Load())
	mu.Lock()
	defer mu.Unlock()
	count := func(a, b time.Time) int {
		k := 0
		for _, at := range oks {
			if !at.Before(a) && at.Before(b) {
				k++
			}
		}
		return k
	}
	before := count(from.Add(-time.Second), from)
	// The first half second after the outage that delivers half the earlier rate:
	// half, because the machine is shared and the rate swings with its load.
	const step = 500 * time.Millisecond
	back := time.Duration(-1)
	for d := time.Duration(0); till.Add(d + step).Before(oks[len(oks)-1]); d += 10 * time.Millisecond {
		if count(till.Add(d), till.Add(d+step)) >= before/4 {
			back = d + step
			break
		}
	}
	during, probes := 0, 0
	for _, a := range srv.Arrivals() {
		if !a.Before(from) && a.Before(till) {
			during++
			if a.Sub(from) >= 500*time.Millisecond {
				probes++
			}
		}
	}
	t.Logf("%d successes/s before the %v outage; %d calls during it, %d after its first half second; back to half that rate %v after it",
		before, outage, during, probes, back)
	if before < 20 {
		t.Fatalf("only %d successes in the second before the outage: nothing to compare with", before)
	}
	if back < 0 || back > bound {
		t.Fatalf("the stage was back to half its earlier rate %v after the outage, want within %v", back, bound)
	}
	// After the first failures open the breaker, one probe a second: the faster
	// recovery must not cost a storm of probes.
	if max := 2 * int(outage/time.Second); probes > max {
		t.Fatalf("%d calls after the first half second of the outage, want at most %d (a probe a second)", probes, max)
	}
}
