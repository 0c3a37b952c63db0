package redrive_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
)

func TestStagesChainOutputsAndRetryDoesNotRedoEarlierStages(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var calls [3]atomic.Int64
		var third sync.Map // item -> failures so far
		p := redrive.Pipeline{Name: "chain", Stages: []redrive.Stage{
			{Name: "a", Policy: fast(3), Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				calls[0].Add(1)
				return append(it.Payload, 'a'), nil
			}},
			{Name: "b", Policy: fast(3), Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				calls[1].Add(1)
				return append(it.Payload, 'b'), nil
			}},
			{Name: "c", Policy: fast(3), Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				calls[2].Add(1)
				n, _ := third.LoadOrStore(it.ID, new(atomic.Int64))
				if n.(*atomic.Int64).Add(1) < 3 {
					return nil, errors.New("flaky")
				}
				return append(it.Payload, 'c'), nil
			}},
		}}
		c := startClient(t, s, testConfig(nil), p)
		in := []redrive.NewItem{{Payload: []byte("x")}, {Payload: []byte("y")}}
		run, err := c.StartRun(context.Background(), "chain", in, redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Status != redrive.RunCompleted || r.Counts.Succeeded != 2 {
			t.Fatalf("run = %s %+v", r.Status, r.Counts)
		}
		if calls[0].Load() != 2 || calls[1].Load() != 2 || calls[2].Load() != 6 {
			t.Fatalf("calls = %d %d %d, want 2 2 6: a retry of stage c must not redo a and b", calls[0].Load(), calls[1].Load(), calls[2].Load())
		}
		got, err := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range got {
			if want := string(it.Input) + "abc"; string(it.Payload) != want || it.State != redrive.StateSucceeded {
				t.Fatalf("item %d: payload %q state %s, want %q succeeded", it.ID, it.Payload, it.State, want)
			}
			atts, err := s.Attempts(context.Background(), it.ID)
			if err != nil {
				t.Fatal(err)
			}
			var outcomes []string
			for _, a := range atts {
				outcomes = append(outcomes, a.Stage+":"+string(a.Outcome))
			}
			if want := "a:succeeded b:succeeded c:retry c:retry c:succeeded"; strings.Join(outcomes, " ") != want {
				t.Fatalf("history %v, want %s", outcomes, want)
			}
			if atts[2].Number != 1 || atts[3].Number != 2 || atts[4].Number != 3 || atts[2].Delay <= 0 {
				t.Fatalf("attempt numbers/delays wrong: %+v", atts)
			}
		}
	})
}

func TestOutcomesFinalExhaustedAndReasons(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		rec := &recorder{}
		p := redrive.Pipeline{Name: "outcomes", Stages: []redrive.Stage{{Name: "work", Policy: fast(3),
			Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				switch string(it.Payload) {
				case "final":
					return nil, retry.Final(errors.New("schema validation failed"))
				case "always":
					return nil, errors.New("connection refused")
				case "panic":
					panic("boom")
				}
				return it.Payload, nil
			}}}}
		c := startClient(t, s, testConfig(rec), p)
		run, err := c.StartRun(context.Background(), "outcomes", []redrive.NewItem{
			{Payload: []byte("ok")}, {Payload: []byte("final")}, {Payload: []byte("always")}, {Payload: []byte("panic")},
			{Invalid: "invalid input: line 5: unexpected end of JSON"},
		}, redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Counts.Succeeded != 1 || r.Counts.Dead != 4 || r.Status != redrive.RunFailed {
			t.Fatalf("run %s %+v", r.Status, r.Counts)
		}
		dead, err := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateDead}})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]struct {
			class    string
			attempts int
			err      string
		}{
			"final":  {"final", 1, "schema validation failed"},
			"always": {"retryable", 3, "connection refused"},
			"panic":  {"final", 1, "handler panicked: boom"},
			"":       {redrive.ClassInvalidInput, 0, "invalid input: line 5"},
		}
		for _, it := range dead {
			w, ok := want[string(it.Input)]
			if !ok || it.Reason == nil {
				t.Fatalf("unexpected dead item %+v", it)
			}
			if it.Reason.Class != w.class || it.Reason.Attempts != w.attempts || !strings.Contains(it.Reason.Error, w.err) ||
				it.Reason.Stage != "work" || it.Reason.At.IsZero() {
				t.Fatalf("item %q reason %+v, want %+v", it.Input, *it.Reason, w)
			}
		}
		if n := rec.count(func(e redrive.Event) bool { _, ok := e.(redrive.DeadLettered); return ok }); n != 4 {
			t.Fatalf("%d DeadLettered events, want 4 (one for the invalid input)", n)
		}
		if n := rec.count(func(e redrive.Event) bool { _, ok := e.(redrive.RetryScheduled); return ok }); n != 2 {
			t.Fatalf("%d RetryScheduled events, want 2", n)
		}
		if n := rec.count(func(e redrive.Event) bool {
			f, ok := e.(redrive.RunFinished)
			return ok && f.Run.Status == redrive.RunFailed
		}); n != 1 {
			t.Fatalf("%d RunFinished(failed) events, want 1", n)
		}
	})
}

func TestRateLimitedDoesNotConsumeAttemptsAndIsBounded(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var calls sync.Map
		pol := fast(2)
		pol.MaxRateLimitWaits = 4
		pol.MaxRateLimitWait = 20 * time.Millisecond
		// A stage limited as a whole lets its items wait for free for
		// RateLimit.MaxLimited; 1 ms makes every wait here the item's own,
		// paid from its allowance. MinRate keeps the pace out of the way.
		p := redrive.Pipeline{Name: "rl", Stages: []redrive.Stage{{Name: "llm_call", Policy: pol,
			RateLimit: redrive.RateLimit{MaxLimited: time.Millisecond, MinRate: 1000},
			Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				v, _ := calls.LoadOrStore(string(it.Payload), new(atomic.Int64))
				n := v.(*atomic.Int64).Add(1)
				if string(it.Payload) == "forever" || n <= 3 {
					return nil, retry.RateLimited(errors.New("429 too many requests"), 10*time.Millisecond)
				}
				return it.Payload, nil
			}}}}
		c := startClient(t, s, testConfig(nil), p)
		run, err := c.StartRun(context.Background(), "rl", []redrive.NewItem{{Payload: []byte("thrice")}, {Payload: []byte("forever")}}, redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Counts.Succeeded != 1 || r.Counts.Dead != 1 {
			t.Fatalf("counts %+v", r.Counts)
		}
		its, _ := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID})
		for _, it := range its {
			atts, _ := s.Attempts(context.Background(), it.ID)
			rl := 0
			for _, a := range atts {
				if a.Outcome == redrive.OutcomeRateLimited {
					rl++
					if a.Delay < 10*time.Millisecond {
						t.Fatalf("rate-limited delay %v is below Retry-After", a.Delay)
					}
				}
			}
			switch string(it.Input) {
			case "thrice":
				// Three waits then success: with 2 attempts allowed, the
				// waits did not consume them.
				if rl != 3 || len(atts) != 4 {
					t.Fatalf("thrice: %d rate-limited of %d attempts", rl, len(atts))
				}
			case "forever":
				// 4 free waits (and perhaps the first wait of each of the
				// two spells in which the whole stage was pushed back, before
				// MaxLimited passed), then rate limits count as retryable
				// attempts: 2 more.
				if rl < 4 || rl > 6 || len(atts) != rl+2 || it.Reason.Attempts != 2 || it.Reason.Class != "rate_limited" {
					t.Fatalf("forever: %d rate-limited of %d attempts, reason %+v", rl, len(atts), it.Reason)
				}
			}
		}
	})
}

func TestFailureBudgetAbortsAndCanceledItemsRedrive(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var broken atomic.Bool
		broken.Store(true)
		p := redrive.Pipeline{Name: "budget", Stages: []redrive.Stage{{Name: "call", Policy: fast(1), Concurrency: 2,
			Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				if broken.Load() {
					return nil, retry.Final(errors.New("401 bad api key"))
				}
				return it.Payload, nil
			}}}}
		cfg := testConfig(nil)
		c := startClient(t, s, cfg, p)
		run, err := c.StartRun(context.Background(), "budget", items(500), redrive.RunOptions{FailureBudget: 0.10, MinItems: 20})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Status != redrive.RunAborted || !strings.Contains(r.Reason, "failure budget exceeded") {
			t.Fatalf("run %s %q", r.Status, r.Reason)
		}
		if r.Counts.Canceled < 400 || r.Counts.Dead < 20 || r.Counts.Succeeded != 0 {
			t.Fatalf("an aborted run should cancel the rest: %+v", r.Counts)
		}
		canceled, _ := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateCanceled}, Limit: 1})
		if len(canceled) != 1 || canceled[0].Reason == nil || !strings.Contains(canceled[0].Reason.Error, "failure budget") {
			t.Fatalf("canceled item lacks its reason: %+v", canceled)
		}
		// The key is fixed: redrive everything that did not succeed.
		broken.Store(false)
		f := redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateDead, redrive.StateCanceled}}
		n, err := c.Redrive(context.Background(), f, redrive.RedriveOptions{DryRun: true})
		if err != nil || n != 500 {
			t.Fatalf("dry run = %d, %v; want 500", n, err)
		}
		if after, _ := s.GetRun(context.Background(), run.ID); after.Counts != r.Counts {
			t.Fatalf("dry run changed counts: %+v -> %+v", r.Counts, after.Counts)
		}
		if n, err = c.Redrive(context.Background(), f, redrive.RedriveOptions{}); err != nil || n != 500 {
			t.Fatalf("redrive = %d, %v", n, err)
		}
		r = wait(t, c, run)
		if r.Status != redrive.RunCompleted || r.Counts.Succeeded != 500 {
			t.Fatalf("after redrive: %s %+v", r.Status, r.Counts)
		}
	})
}

func TestRunStatusThresholds(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		p := redrive.Pipeline{Name: "thresholds", Stages: []redrive.Stage{{Name: "s", Policy: fast(1),
			Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				if bytes.HasPrefix(it.Payload, []byte("bad")) {
					return nil, retry.Final(errors.New("bad"))
				}
				return it.Payload, nil
			}}}}
		c := startClient(t, s, testConfig(nil), p)
		mk := func(good, bad int) []redrive.NewItem {
			var out []redrive.NewItem
			for i := range good {
				out = append(out, redrive.NewItem{Payload: fmt.Appendf(nil, "good%d", i)})
			}
			for i := range bad {
				out = append(out, redrive.NewItem{Payload: fmt.Appendf(nil, "bad%d", i)})
			}
			return out
		}
		for _, tc := range []struct {
			good, bad int
			want      redrive.RunStatus
		}{{19, 1, redrive.RunCompleted}, {18, 2, redrive.RunPartialSuccess}, {10, 10, redrive.RunPartialSuccess}, {9, 11, redrive.RunFailed}} {
			run, err := c.StartRun(context.Background(), "thresholds", mk(tc.good, tc.bad), redrive.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r := wait(t, c, run); r.Status != tc.want {
				t.Errorf("%d good %d bad: %s, want %s", tc.good, tc.bad, r.Status, tc.want)
			}
		}
	})
}

func TestIdempotencyKeysAndResumeByName(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var calls atomic.Int64
		p := redrive.Pipeline{Name: "idem", Stages: []redrive.Stage{{Name: "s", Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
			calls.Add(1)
			return it.Payload, nil
		}}}}
		c := startClient(t, s, testConfig(nil), p)
		in := []redrive.NewItem{{Key: "a", Payload: []byte("1")}, {Key: "b", Payload: []byte("2")}}
		run, err := c.StartRun(context.Background(), "idem", in, redrive.RunOptions{Name: "nightly"})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, c, run)
		again, err := c.StartRun(context.Background(), "idem", append(in, redrive.NewItem{Key: "c", Payload: []byte("3")}), redrive.RunOptions{Name: "nightly"})
		if err != nil {
			t.Fatal(err)
		}
		if again.ID != run.ID {
			t.Fatalf("resume made a new run %d, want %d", again.ID, run.ID)
		}
		r := wait(t, c, again)
		if r.Counts.Total != 3 || r.Counts.Succeeded != 3 || calls.Load() != 3 {
			t.Fatalf("resume: %+v after %d calls, want 3 items and 3 calls", r.Counts, calls.Load())
		}
		res, err := c.AddItems(context.Background(), run.ID, []redrive.NewItem{{Key: "a", Payload: []byte("other")}})
		if err != nil || len(res) != 1 || !res[0].Existing {
			t.Fatalf("existing key: %+v %v", res, err)
		}
	})
}

func TestBreakerStopsClaimingWhileOpen(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var down atomic.Bool
		down.Store(true)
		var calls, opened, halfOpened atomic.Int64
		rec := &recorder{}
		br := retry.NewBreaker(retry.BreakerOptions{ConsecutiveFailures: 3, OpenFor: 150 * time.Millisecond,
			OnStateChange: func(_, to retry.BreakerState) {
				switch to {
				case retry.BreakerOpen:
					opened.Add(1)
				case retry.BreakerHalfOpen:
					halfOpened.Add(1)
				}
			}})
		p := redrive.Pipeline{Name: "br", Stages: []redrive.Stage{{Name: "dep", Policy: fast(5), Breaker: br, Concurrency: 1,
			Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				calls.Add(1)
				if down.Load() {
					return nil, errors.New("503 service unavailable")
				}
				return it.Payload, nil
			}}}}
		c := startClient(t, s, testConfig(rec), p)
		run, err := c.StartRun(context.Background(), "br", items(50), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The outage lasts until the breaker has opened three times (it
		// tripped, and two half-open probes failed), however long the
		// machine takes to get there.
		waitFor(t, "the breaker to open three times", func() bool { return opened.Load() >= 3 })
		// Without the breaker, 50 items × 5 attempts at millisecond delays
		// would make 250 calls and 50 dead items. With it, the calls are
		// the 3 that tripped it plus one probe per half-open period. The
		// calls are read before the periods, which only grow.
		n := calls.Load()
		if probes := halfOpened.Load(); n > 3+probes {
			t.Fatalf("%d calls while the dependency was down with %d half-open periods: the breaker did not stop claiming", n, probes)
		}
		if r, _ := s.GetRun(context.Background(), run.ID); r.Counts.Dead != 0 {
			t.Fatalf("%d items dead during the outage", r.Counts.Dead)
		}
		down.Store(false)
		r := wait(t, c, run)
		if r.Counts.Succeeded != 50 {
			t.Fatalf("after recovery: %+v", r.Counts)
		}
		waitFor(t, "a BreakerChanged(open) event", func() bool {
			return rec.count(func(e redrive.Event) bool {
				b, ok := e.(redrive.BreakerChanged)
				return ok && b.To == retry.BreakerOpen
			}) >= 1
		})
	})
}

func TestGracefulStopReleasesLeases(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		started := make(chan struct{}, 100)
		p := redrive.Pipeline{Name: "slow", Stages: []redrive.Stage{{Name: "s", Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}}}}
		cfg := testConfig(nil)
		cfg.Workers = 4
		c := redrive.NewClient(s, cfg)
		if err := c.Register(p); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		run, err := c.StartRun(context.Background(), "slow", items(10), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			<-started
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d > 3*time.Second {
			t.Fatalf("stop took %v", d)
		}
		r, _ := s.GetRun(context.Background(), run.ID)
		if r.Counts.Pending != 10 || r.Counts.Running != 0 {
			t.Fatalf("after stop: %+v, want all 10 pending with no lease held", r.Counts)
		}
		its, _ := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID})
		for _, it := range its {
			if atts, _ := s.Attempts(context.Background(), it.ID); len(atts) != 0 || it.Attempt != 0 {
				t.Fatalf("an interrupted attempt was counted: %+v", atts)
			}
		}
	})
}

// TestRescuerRecordsLostAttemptAndRetries: a worker vanished holding three
// leases, two of whose attempts it had recorded as started. Those get a lost
// attempt from their recorded start and succeed as attempt 2; the third,
// never started, goes back without an attempt charged.
func TestRescuerRecordsLostAttemptAndRetries(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		now := time.Now()
		// A worker that vanished: it claimed items and never came back.
		run, _, err := s.CreateRun(ctx, "rescue", redrive.RunOptions{}, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Enqueue(ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: "rescue", Stage: "s", Items: items(3), Now: now}); err != nil {
			t.Fatal(err)
		}
		ghost, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "ghost", Pipelines: []string{"rescue"}, Limit: 3, Now: now, LeaseUntil: now.Add(100 * time.Millisecond)})
		if err != nil || len(ghost) != 3 {
			t.Fatalf("ghost claim: %d %v", len(ghost), err)
		}
		began := now.Add(-20 * time.Second).Truncate(time.Millisecond)
		marks := []redrive.StartMark{{Lease: ghost[0].Ref(), At: began}, {Lease: ghost[1].Ref(), At: began}}
		if lost, err := s.MarkStarted(ctx, marks); err != nil || len(lost) != 0 {
			t.Fatalf("MarkStarted = %v, %v", lost, err)
		}
		rec := &recorder{}
		p := redrive.Pipeline{Name: "rescue", Stages: []redrive.Stage{{Name: "s", Policy: fast(3), Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
			return it.Payload, nil
		}}}}
		c := startClient(t, s, testConfig(rec), p)
		r := wait(t, c, run)
		if r.Counts.Succeeded != 3 {
			t.Fatalf("%+v", r.Counts)
		}
		for i, g := range ghost {
			atts, _ := s.Attempts(ctx, g.Item.ID)
			it, _ := s.GetItem(ctx, g.Item.ID)
			if i == 2 {
				if len(atts) != 1 || atts[0].Outcome != redrive.OutcomeSucceeded || atts[0].Number != 1 || it.LeaseLosses != 1 {
					t.Fatalf("unstarted lease: history %+v, lease losses %d; want one success as attempt 1 and one loss", atts, it.LeaseLosses)
				}
				continue
			}
			if len(atts) != 2 || atts[0].Outcome != redrive.OutcomeLost || atts[0].Class != redrive.ClassLost || atts[1].Number != 2 {
				t.Fatalf("history %+v, want a lost attempt then success as attempt 2", atts)
			}
			if !atts[0].StartedAt.Equal(began) || it.LeaseLosses != 0 {
				t.Fatalf("lost attempt started %v, want its recorded start %v; lease losses %d", atts[0].StartedAt, began, it.LeaseLosses)
			}
			// The vanished worker comes back: its result must not apply.
			applied, err := s.Complete(ctx, []redrive.Completion{{ItemID: g.Item.ID, Token: g.Token, State: redrive.StateDead, Now: time.Now(),
				Reason: &redrive.Reason{Class: "final", Error: "stale"}, Record: redrive.Attempt{Number: 1, Outcome: redrive.OutcomeDead}}})
			if err != nil || applied[0] {
				t.Fatalf("stale completion applied=%v err=%v", applied, err)
			}
		}
		var started, unstarted int
		rec.count(func(e redrive.Event) bool {
			if r, ok := e.(redrive.Rescued); ok {
				if r.Started {
					started++
				} else {
					unstarted++
				}
			}
			return false
		})
		if started != 2 || unstarted != 1 {
			t.Fatalf("Rescued events: %d started, %d unstarted; want 2 and 1", started, unstarted)
		}
	})
}

func TestRedriveFromFailedStageWithFiltersAndRate(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var fixed atomic.Bool
		var firstCalls atomic.Int64
		p := redrive.Pipeline{Name: "docs", Stages: []redrive.Stage{
			{Name: "parse", Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				firstCalls.Add(1)
				return append(it.Payload, "|parsed"...), nil
			}},
			{Name: "embed", Policy: fast(2), Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
				if !fixed.Load() {
					if bytes.Contains(it.Payload, []byte("odd")) {
						return nil, retry.Final(errors.New("unsupported extension"))
					}
					return nil, errors.New("embedding model timeout")
				}
				return append(it.Payload, "|embedded"...), nil
			}},
		}}
		c := startClient(t, s, testConfig(nil), p)
		var in []redrive.NewItem
		for i := range 20 {
			kind := "even"
			if i%2 == 1 {
				kind = "odd"
			}
			in = append(in, redrive.NewItem{Payload: fmt.Appendf(nil, "%s-%d", kind, i)})
		}
		run, err := c.StartRun(context.Background(), "docs", in, redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Counts.Dead != 20 {
			t.Fatalf("%+v", r.Counts)
		}
		ctx := context.Background()
		if n, _ := redrive.Redrive(ctx, s, redrive.ItemFilter{RunID: run.ID, Class: "final"}, redrive.RedriveOptions{DryRun: true}); n != 10 {
			t.Fatalf("class filter dry run = %d, want 10", n)
		}
		if n, _ := redrive.Redrive(ctx, s, redrive.ItemFilter{RunID: run.ID, Stage: "embed", ErrorContains: "timeout"}, redrive.RedriveOptions{DryRun: true}); n != 10 {
			t.Fatalf("error filter dry run = %d, want 10", n)
		}
		if _, err := redrive.Redrive(ctx, s, redrive.ItemFilter{States: []redrive.State{redrive.StateSucceeded}}, redrive.RedriveOptions{}); !errors.Is(err, redrive.ErrBadFilter) {
			t.Fatalf("redrive of succeeded items: %v, want ErrBadFilter", err)
		}
		fixed.Store(true)
		t0 := time.Now()
		n, err := c.Redrive(ctx, redrive.ItemFilter{RunID: run.ID, ErrorContains: "timeout", Limit: 4}, redrive.RedriveOptions{Rate: 20})
		if err != nil || n != 4 {
			t.Fatalf("redrive = %d %v", n, err)
		}
		for {
			got, _ := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateSucceeded}})
			if len(got) == 4 {
				break
			}
			if time.Since(t0) > 10*time.Second {
				t.Fatalf("redriven items did not finish: %d", len(got))
			}
			time.Sleep(10 * time.Millisecond)
		}
		// 4 items at 20 per second: the last is due 150 ms after the first.
		if d := time.Since(t0); d < 150*time.Millisecond {
			t.Fatalf("rate 20/s finished 4 items in %v", d)
		}
		got, _ := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateSucceeded}})
		for _, it := range got {
			if !strings.HasSuffix(string(it.Payload), "|parsed|embedded") {
				t.Fatalf("payload %q", it.Payload)
			}
			atts, _ := s.Attempts(ctx, it.ID)
			last := atts[len(atts)-1]
			if last.Stage != "embed" || last.Number != 1 || last.Outcome != redrive.OutcomeSucceeded || len(atts) != 4 {
				t.Fatalf("redrive must restart at the failed stage with a fresh counter and keep history: %+v", atts)
			}
		}
		if firstCalls.Load() != 20 {
			t.Fatalf("stage parse ran %d times, want 20: redrive starts at the stage that failed", firstCalls.Load())
		}
		var buf bytes.Buffer
		n, err = redrive.Export(ctx, s, redrive.ItemFilter{RunID: run.ID}, &buf)
		if err != nil || n != 16 {
			t.Fatalf("export = %d %v", n, err)
		}
		line, _, _ := bytes.Cut(buf.Bytes(), []byte("\n"))
		var recd redrive.ExportRecord
		if err := json.Unmarshal(line, &recd); err != nil || recd.Item.Reason == nil || len(recd.Attempts) == 0 {
			t.Fatalf("export line %s: %v", line, err)
		}
		if n, _ := redrive.Purge(ctx, s, redrive.ItemFilter{RunID: run.ID, Class: "final"}, false); n != 10 {
			t.Fatalf("purge = %d", n)
		}
		if r, _ := s.GetRun(ctx, run.ID); r.Counts.Total != 20 || r.Counts.Purged != 10 || r.Counts.Dead != 6 {
			t.Fatalf("after purge %+v", r.Counts)
		}
	})
}

// The seeds' flaky stage: half of the calls fail. With 3 attempts an item
// dies with probability 1/8. 2,000 items: dead ~ Binomial(2000, 0.125), mean
// 250, sd 14.8; the bound of ±6 sd fails by chance with probability < 1e-8.
// The source is seeded as well, so the test is also reproducible.
func TestFlakyStageMatchesProbability(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(42, 7))
		p := redrive.Pipeline{Name: "flaky", Stages: []redrive.Stage{{Name: "llm", Policy: fast(3), Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
			mu.Lock()
			fail := rng.Float64() < 0.5
			mu.Unlock()
			if fail {
				return nil, errors.New("429")
			}
			return it.Payload, nil
		}}}}
		c := startClient(t, s, testConfig(nil), p)
		run, err := c.StartRun(context.Background(), "flaky", items(2000), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Counts.Dead < 161 || r.Counts.Dead > 339 {
			t.Fatalf("%d dead of 2000, outside 250±89", r.Counts.Dead)
		}
		hist, err := s.RetryHistogram(context.Background(), run.ID)
		if err != nil {
			t.Fatal(err)
		}
		byRetries := map[int]int{}
		sum := 0
		for _, b := range hist {
			byRetries[b.Retries] = b.Items
			sum += b.Items
		}
		// 0 retries: Binomial(2000, 1/2), sd 22.4; 1 retry: Binomial(2000, 1/4), sd 19.4.
		if sum != 2000 || byRetries[0] < 866 || byRetries[0] > 1134 || byRetries[1] < 384 || byRetries[1] > 616 {
			t.Fatalf("histogram %v", hist)
		}
		top, err := s.TopErrors(context.Background(), redrive.ErrorFilter{RunID: run.ID})
		if err != nil || len(top) == 0 || top[0].Error != "429" || top[0].Stage != "llm" {
			t.Fatalf("top errors %+v %v", top, err)
		}
	})
}

// A handler that retries in-process under the engine's durable retries:
// the two layers of 3 attempts make 3 calls to a dependency that is down,
// not 9.
func TestNestedRetryInsideStageDoesNotMultiplyCalls(t *testing.T) {
	s := openStore(t)
	var calls atomic.Int64
	inner := retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, JitterMode: retry.JitterNone}
	p := redrive.Pipeline{Name: "nested", Stages: []redrive.Stage{{Name: "call", Policy: fast(3),
		Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			return nil, retry.Do(ctx, inner, func(context.Context) error {
				calls.Add(1)
				return errors.New("503 service unavailable")
			})
		}}}}
	c := startClient(t, s, testConfig(nil), p)
	run, err := c.StartRun(context.Background(), "nested", items(1), redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := wait(t, c, run)
	if r.Counts.Dead != 1 || calls.Load() != 3 {
		t.Fatalf("%d calls, %+v; want 3 calls and the item dead", calls.Load(), r.Counts)
	}
}

// An operator cancels a run from another process (the JSON API works on the
// store): the items running then are canceled when their attempt ends
// instead of moving on, and the run's counts settle. The handlers wait
// until the cancel is done, so which items were running then is known
// exactly: the run's running count right after the pending items were
// canceled.
func TestRunCanceledFromAnotherProcessSettles(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var started atomic.Int64
		gate := make(chan struct{})
		slow := func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			started.Add(1)
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return it.Payload, nil
		}
		// Flow control off: slow start would keep all but 4 calls of a
		// stage whose calls never end waiting, and this test needs every
		// worker in a handler.
		off := redrive.RateLimit{Off: true}
		p := redrive.Pipeline{Name: "cancel", Stages: []redrive.Stage{{Name: "one", Handle: slow, RateLimit: off}, {Name: "two", Handle: slow, RateLimit: off}}}
		cfg := testConfig(nil)
		c := startClient(t, s, cfg, p)
		ctx := context.Background()
		const n = 400
		run, err := c.StartRun(ctx, "cancel", items(n), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "every worker to run a handler", func() bool { return started.Load() >= int64(cfg.Workers) })
		now := time.Now()
		if err := s.SetRunStatus(ctx, run.ID, redrive.RunAborted, "canceled by an operator", now); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CancelPending(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StatePending}},
			redrive.Reason{Class: redrive.ClassCanceled, Error: "canceled by an operator", At: now}); err != nil {
			t.Fatal(err)
		}
		at, err := s.GetRun(ctx, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		close(gate)
		r := wait(t, c, run)
		if r.Status != redrive.RunAborted || r.Counts.Canceled < n-at.Counts.Running || r.Counts.Succeeded > at.Counts.Running ||
			r.Counts.Canceled+r.Counts.Succeeded != n {
			t.Fatalf("after cancel with %d items running: %s %+v", at.Counts.Running, r.Status, r.Counts)
		}
		if got := started.Load(); got > 2*int64(at.Counts.Running) {
			t.Fatalf("%d handler calls for %d items running at the cancel: canceled items ran", got, at.Counts.Running)
		}
	})
}

func TestConcurrentStopsStopOnce(t *testing.T) {
	s := openStore(t)
	p := redrive.Pipeline{Name: "stop", Stages: []redrive.Stage{{Name: "s", Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
		return it.Payload, nil
	}}}}
	ctx, cancel := context.WithCancel(context.Background())
	c := redrive.NewClient(s, testConfig(nil))
	if err := c.Register(p); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = c.Stop(context.Background()) })
	}
	cancel() // Start's context ending stops the client too
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, redrive.ErrNotStarted) {
			t.Fatalf("Stop %d: %v", i, err)
		}
	}
	if err := c.Stop(context.Background()); !errors.Is(err, redrive.ErrNotStarted) {
		t.Fatalf("Stop after stop: %v, want ErrNotStarted", err)
	}
	// The client can start again.
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A worker whose lease was taken over (it hung, or lost the database for
// longer than the lease) learns it at its next heartbeat and stops: its
// handler's context is canceled and nothing it did is recorded.
func TestLostLeaseInterruptsHandler(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		started := make(chan int64, 1)
		interrupted := make(chan struct{})
		p := redrive.Pipeline{Name: "stale", Stages: []redrive.Stage{{Name: "s", Handle: func(hctx context.Context, it *redrive.Item) ([]byte, error) {
			started <- it.ID
			<-hctx.Done()
			close(interrupted)
			return nil, hctx.Err()
		}}}}
		cfg := testConfig(nil)
		cfg.HeartbeatInterval = 50 * time.Millisecond
		c := startClient(t, s, cfg, p)
		run, err := c.StartRun(ctx, "stale", items(1), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		id := <-started
		// Once the start is recorded, the start marks, which would also
		// learn of a lost lease, leave this one alone: only the heartbeat
		// can tell the worker.
		waitFor(t, "the attempt's start mark", func() bool {
			it, err := s.GetItem(ctx, id)
			return err == nil && !it.AttemptStartedAt.IsZero()
		})
		// Another worker takes the item over, as if the lease had expired.
		// A claim skips rows locked by a heartbeat in flight (SKIP LOCKED on
		// PostgreSQL), as a rescuer would: try until the row is free.
		later := time.Now().Add(time.Hour)
		var thief []redrive.Lease
		waitFor(t, "the take-over", func() bool {
			thief, err = s.ClaimExpired(ctx, redrive.ClaimRequest{Owner: "thief", Pipelines: []string{"stale"}, Limit: 1, Now: later, LeaseUntil: later.Add(time.Hour)})
			if err != nil {
				t.Fatalf("take over: %v", err)
			}
			return len(thief) > 0
		})
		if len(thief) != 1 || thief[0].Item.ID != id {
			t.Fatalf("take over: %+v", thief)
		}
		select {
		case <-interrupted:
		case <-time.After(30 * time.Second):
			t.Fatal("the stale worker's handler was not interrupted")
		}
		// Stop returns once the stale worker's bookkeeping is done.
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := c.Stop(sctx); err != nil {
			t.Fatal(err)
		}
		if atts, _ := s.Attempts(ctx, id); len(atts) != 0 {
			t.Fatalf("the stale worker recorded %+v", atts)
		}
		it, _ := s.GetItem(ctx, id)
		if it.State != redrive.StateRunning || it.LeaseOwner != "thief" {
			t.Fatalf("the item should still be the thief's: %+v", it)
		}
		now := time.Now()
		applied, err := s.Complete(ctx, []redrive.Completion{{ItemID: id, Token: thief[0].Token, State: redrive.StateSucceeded, Now: now,
			Record: redrive.Attempt{Number: 1, Outcome: redrive.OutcomeSucceeded, StartedAt: now, FinishedAt: now}}})
		if err != nil || !applied[0] {
			t.Fatalf("the new owner's completion: %v %v", applied, err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if r := wait(t, c, run); r.Counts.Succeeded != 1 {
			t.Fatalf("%+v", r.Counts)
		}
	})
}
