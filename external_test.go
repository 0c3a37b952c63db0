package redrive_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
)

// extPipeline is a pipeline whose middle stage is external: "upper" (Go)
// wraps the input, "ext" is leased, "mark" (Go) appends "!".
func extPipeline(name string, ext redrive.Stage) redrive.Pipeline {
	ext.Name, ext.External = "ext", true
	if ext.Policy.MaxAttempts == 0 {
		ext.Policy = fast(3)
	}
	return redrive.Pipeline{Name: name, Stages: []redrive.Stage{
		{Name: "upper", Policy: fast(3), Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
			return bytes.ToUpper(it.Payload), nil
		}},
		ext,
		{Name: "mark", Policy: fast(3), Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
			return append(append([]byte{}, it.Payload...), '!'), nil
		}},
	}}
}

func lease(t *testing.T, c *redrive.Client, req redrive.ExternalLeaseRequest) []redrive.ExternalLease {
	t.Helper()
	if req.Pipeline == "" {
		req.Pipeline, req.Stage = "p", "ext"
	}
	if req.Worker == "" {
		req.Worker = "test-worker"
	}
	ls, err := c.LeaseExternal(context.Background(), req)
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	return ls
}

func settle(t *testing.T, c *redrive.Client, rs ...redrive.ExternalResult) []redrive.ExternalSettled {
	t.Helper()
	out, err := c.SettleExternal(context.Background(), "test-worker", rs)
	if err != nil {
		t.Fatalf("settle: %v", err)
	}
	return out
}

func ok(l redrive.ExternalLease, out string) redrive.ExternalResult {
	return redrive.ExternalResult{Lease: l.Ref(), Output: []byte(out)}
}

func failed(l redrive.ExternalLease, class retry.Class, msg string, after time.Duration) redrive.ExternalResult {
	return redrive.ExternalResult{Lease: l.Ref(), Failure: &redrive.ExternalFailure{Class: class, Error: msg, RetryAfter: after}}
}

// TestExternalStageRunsToCompletion works a pipeline whose middle stage is
// leased by a worker goroutine, with long polls and batched results: every
// item passes the Go stages around it, the run completes, and the external
// attempts are recorded and observed like a handler's.
func TestExternalStageRunsToCompletion(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		rec := &recorder{}
		c := startClient(t, s, testConfig(rec), extPipeline("p", redrive.Stage{}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				ls, err := c.LeaseExternal(ctx, redrive.ExternalLeaseRequest{Pipeline: "p", Stage: "ext", Worker: "w1", Max: 16, Wait: time.Second})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("lease: %v", err)
					}
					return
				}
				rs := make([]redrive.ExternalResult, len(ls))
				for i, l := range ls {
					if l.Attempt != 1 || l.Item.Stage != "ext" {
						t.Errorf("lease %+v: want attempt 1 of stage ext", l)
					}
					rs[i] = ok(l, "<"+string(l.Item.Payload)+">")
				}
				if len(rs) > 0 {
					out, err := c.SettleExternal(ctx, "w1", rs)
					if err != nil {
						t.Errorf("settle: %v", err)
						return
					}
					for _, o := range out {
						if !o.Applied || o.Outcome != redrive.OutcomeSucceeded || o.State != redrive.StatePending {
							t.Errorf("settled %+v: want applied, succeeded, pending at the next stage", o)
						}
					}
				}
			}
		}()
		run, err := c.StartRun(context.Background(), "p", items(40), redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		run = wait(t, c, run)
		cancel()
		wg.Wait()
		if run.Status != redrive.RunCompleted || run.Counts.Succeeded != 40 {
			t.Fatalf("run = %+v", run)
		}
		its, err := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range its {
			if !strings.HasPrefix(string(it.Payload), `<{"N":`) || !strings.HasSuffix(string(it.Payload), `}>!`) {
				t.Errorf("item %d output %q: want the external stage's output between the Go stages'", it.ID, it.Payload)
			}
		}
		as, err := s.Attempts(context.Background(), its[0].ID)
		if err != nil || len(as) != 3 || as[1].Stage != "ext" || as[1].Outcome != redrive.OutcomeSucceeded || as[1].ConfigHash == "" {
			t.Errorf("attempts = %+v, %v: want three, the second the external stage's", as, err)
		}
		if n := rec.count(func(e redrive.Event) bool {
			a, ok := e.(redrive.AttemptFinished)
			return ok && a.Stage == "ext" && a.Outcome == redrive.OutcomeSucceeded
		}); n != 40 {
			t.Errorf("%d AttemptFinished events of the external stage, want 40", n)
		}
		ws, err := s.ListWorkers(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, w := range ws {
			found = found || w.Owner == "w1" && w.Serves("p")
		}
		if !found {
			t.Errorf("workers = %+v: want the external worker w1 serving p", ws)
		}
	})
}

// TestExternalFencing shows that a result applies once, to the current
// lease only: a second result of one lease, and the late result of a lease
// that expired and was rescued, are refused and change nothing.
func TestExternalFencing(t *testing.T) {
	s := openStore(t)
	cfg := testConfig(nil)
	c := startClient(t, s, cfg, extPipeline("p", redrive.Stage{Policy: fast(5)}))
	run, err := c.StartRun(context.Background(), "p", items(2), redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ls []redrive.ExternalLease
	for len(ls) < 2 {
		ls = append(ls, lease(t, c, redrive.ExternalLeaseRequest{Max: 2, Wait: 5 * time.Second, Lease: time.Second})...)
	}
	// Completed twice: the second changes nothing.
	first := settle(t, c, ok(ls[0], `"a"`))
	again := settle(t, c, ok(ls[0], `"b"`), failed(ls[0], retry.ClassFinal, "late", 0))
	if !first[0].Applied || again[0].Applied || again[1].Applied || again[0].Error == "" {
		t.Fatalf("first %+v, again %+v: want the first applied and the others refused", first, again)
	}
	// The other lease expires while its worker still runs; the rescuer
	// charges its attempt and the item is leased again.
	var relet []redrive.ExternalLease
	deadline := time.Now().Add(20 * time.Second)
	for len(relet) == 0 && time.Now().Before(deadline) {
		relet = lease(t, c, redrive.ExternalLeaseRequest{Wait: time.Second})
	}
	if len(relet) != 1 || relet[0].Item.ID != ls[1].Item.ID || relet[0].Token == ls[1].Token || relet[0].Attempt != 2 {
		t.Fatalf("after the lease expired: %+v, want item %d again as attempt 2 with a new token", relet, ls[1].Item.ID)
	}
	late := settle(t, c, ok(ls[1], `"late"`))
	hb, err := func() ([]redrive.ExternalSettled, error) {
		_, out, err := c.HeartbeatExternal(context.Background(), "test-worker", []redrive.LeaseRef{ls[1].Ref(), relet[0].Ref()}, 0)
		return out, err
	}()
	if err != nil {
		t.Fatal(err)
	}
	if late[0].Applied || hb[0].Applied || !hb[1].Applied {
		t.Fatalf("late result %+v, heartbeats %+v: want the stale lease refused and the new one extended", late, hb)
	}
	if r := settle(t, c, ok(relet[0], `"new"`)); !r[0].Applied {
		t.Fatalf("the current lease's result: %+v", r)
	}
	run = wait(t, c, run)
	if run.Counts.Succeeded != 2 {
		t.Fatalf("run = %+v", run.Counts)
	}
	it, err := s.GetItem(context.Background(), ls[1].Item.ID)
	if err != nil || string(it.Payload) != `"NEW"!` && string(it.Payload) != `"new"!` {
		t.Errorf("item = %s, %v: want the current lease's output", it.Payload, err)
	}
	as, _ := s.Attempts(context.Background(), ls[1].Item.ID)
	var outcomes []string
	for _, a := range as {
		outcomes = append(outcomes, a.Stage+":"+string(a.Outcome))
	}
	if strings.Join(outcomes, " ") != "upper:succeeded ext:lost ext:succeeded mark:succeeded" {
		t.Errorf("attempts %v: want one lost and one successful attempt at ext", outcomes)
	}
	as, _ = s.Attempts(context.Background(), ls[0].Item.ID)
	if len(as) != 3 {
		t.Errorf("item completed twice has %d attempts, want 3", len(as))
	}
}

// TestExternalFailureClasses checks that the classes a worker reports
// mean what they mean for a Go handler: final is dead at once with its
// message as the reason; rate_limited waits the Retry-After, closes the
// stage's gate, and uses up no attempt; retryable uses up attempts until
// the policy's last one.
func TestExternalFailureClasses(t *testing.T) {
	s := openStore(t)
	c := startClient(t, s, testConfig(nil), extPipeline("p", redrive.Stage{Policy: fast(2)}))
	run, err := c.StartRun(context.Background(), "p", items(3), redrive.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ls []redrive.ExternalLease
	for len(ls) < 3 {
		ls = append(ls, lease(t, c, redrive.ExternalLeaseRequest{Max: 3, Wait: 5 * time.Second})...)
	}
	const after = 600 * time.Millisecond
	// The gate closes until Retry-After past the settle's own clock, which
	// is read after this.
	start := time.Now()
	out := settle(t, c,
		failed(ls[0], retry.ClassFinal, "schema mismatch in field x", 0),
		failed(ls[1], retry.ClassRateLimited, "429 from the model", after),
		failed(ls[2], retry.ClassRetryable, "connection reset", 0))
	if out[0].State != redrive.StateDead || out[1].Outcome != redrive.OutcomeRateLimited || out[1].Delay < after ||
		out[2].Outcome != redrive.OutcomeRetry {
		t.Fatalf("settled %+v", out)
	}
	dead, err := s.GetItem(context.Background(), ls[0].Item.ID)
	if err != nil || dead.Reason == nil || dead.Reason.Class != "final" || dead.Reason.Error != "schema mismatch in field x" || dead.Reason.Stage != "ext" {
		t.Fatalf("final item = %+v, %v: want dead at ext with the worker's message", dead.Reason, err)
	}
	// The gate is closed for the Retry-After: the retryable item, due at
	// once, is not handed out until it opens.
	var got []redrive.ExternalLease
	for len(got) < 2 && time.Since(start) < 10*time.Second {
		for _, l := range lease(t, c, redrive.ExternalLeaseRequest{Max: 2, Wait: 2 * time.Second}) {
			got = append(got, l)
			if time.Since(start) < after {
				t.Errorf("item %d handed out %v after a Retry-After of %v", l.Item.ID, time.Since(start), after)
			}
		}
	}
	if len(got) != 2 {
		t.Fatalf("after the gate opened: %d leases, want 2", len(got))
	}
	for _, l := range got {
		switch l.Item.ID {
		case ls[1].Item.ID:
			if l.Attempt != 1 {
				t.Errorf("rate-limited item leased as attempt %d: the wait must use up no attempt", l.Attempt)
			}
			settle(t, c, ok(l, `"fine"`))
		case ls[2].Item.ID:
			if l.Attempt != 2 {
				t.Errorf("retried item leased as attempt %d, want 2", l.Attempt)
			}
			if r := settle(t, c, failed(l, retry.ClassRetryable, "connection reset again", 0)); r[0].State != redrive.StateDead {
				t.Errorf("the last allowed attempt failed: %+v, want dead", r[0])
			}
		}
	}
	run = wait(t, c, run)
	if run.Counts.Succeeded != 1 || run.Counts.Dead != 2 {
		t.Fatalf("counts = %+v", run.Counts)
	}
}

// TestExternalRateLimitBoundsHandouts leases from a stage limited to 20
// calls a second as fast as four greedy workers can: what is handed out
// keeps to the rate. (A slow machine only spreads the hand-outs further.)
func TestExternalRateLimitBoundsHandouts(t *testing.T) {
	s := openStore(t)
	const rate, want = 20, 40
	c := startClient(t, s, testConfig(nil), extPipeline("p", redrive.Stage{RateLimit: redrive.RateLimit{Rate: rate}}))
	if _, err := c.StartRun(context.Background(), "p", items(want+20), redrive.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []time.Time
	deadline := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				mu.Lock()
				done := len(got) >= want
				mu.Unlock()
				if done {
					return
				}
				ls, err := c.LeaseExternal(context.Background(), redrive.ExternalLeaseRequest{Pipeline: "p", Stage: "ext", Worker: "greedy", Max: 100, Wait: time.Second})
				if err != nil {
					t.Error(err)
					return
				}
				now := time.Now()
				rs := make([]redrive.ExternalResult, len(ls))
				for i, l := range ls {
					rs[i] = ok(l, `1`)
				}
				mu.Lock()
				for range ls {
					got = append(got, now)
				}
				mu.Unlock()
				if len(rs) > 0 {
					if _, err := c.SettleExternal(context.Background(), "greedy", rs); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(got) < want {
		t.Fatalf("%d items handed out in a minute at %d/s: starved", len(got), rate)
	}
	// The attempts' starts are the hand-outs as the server timed them,
	// right after their slots of the pace: 1/rate apart after a burst of
	// 1, so n of them span at least (n-2)/rate.
	its, err := s.ListItems(context.Background(), redrive.ItemFilter{Stage: "mark", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	for _, it := range its {
		as, err := s.Attempts(context.Background(), it.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.Stage == "ext" {
				starts = append(starts, a.StartedAt)
			}
		}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	least := time.Duration(float64(len(starts)-2) / rate * float64(time.Second))
	if span := starts[len(starts)-1].Sub(starts[0]); len(starts) < want || span < least {
		t.Fatalf("%d items handed out in %v at %d/s: want at least %v", len(starts), span, rate, least)
	}
}

// TestExternalReleaseChargesNothing releases a leased item unworked: it is
// pending again at once, no attempt recorded, and the next lease is its
// first attempt.
func TestExternalReleaseChargesNothing(t *testing.T) {
	s := openStore(t)
	c := startClient(t, s, testConfig(nil), extPipeline("p", redrive.Stage{}))
	if _, err := c.StartRun(context.Background(), "p", items(1), redrive.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	ls := lease(t, c, redrive.ExternalLeaseRequest{Wait: 5 * time.Second})
	if len(ls) != 1 {
		t.Fatalf("%d leases", len(ls))
	}
	if err := c.ReleaseExternal(context.Background(), "test-worker", []redrive.LeaseRef{ls[0].Ref()}); err != nil {
		t.Fatal(err)
	}
	again := lease(t, c, redrive.ExternalLeaseRequest{Wait: 5 * time.Second})
	if len(again) != 1 || again[0].Item.ID != ls[0].Item.ID || again[0].Attempt != 1 {
		t.Fatalf("after release: %+v, want the item again as attempt 1", again)
	}
	as, _ := s.Attempts(context.Background(), ls[0].Item.ID)
	if len(as) != 1 {
		t.Errorf("%d attempts recorded, want only the first stage's", len(as))
	}
}

// TestExternalLongPollWakes waits on an empty stage; items submitted later
// are handed out as soon as they are due, not at the end of the wait.
func TestExternalLongPollWakes(t *testing.T) {
	s := openStore(t)
	cfg := testConfig(nil)
	cfg.PollInterval = time.Second // the wake, not the poll, must bring the items
	c := startClient(t, s, cfg, redrive.Pipeline{Name: "p", Stages: []redrive.Stage{{Name: "ext", External: true}}})
	type result struct {
		n  int
		at time.Time
	}
	done := make(chan result, 1)
	go func() {
		ls := lease(t, c, redrive.ExternalLeaseRequest{Max: 5, Wait: 20 * time.Second})
		done <- result{len(ls), time.Now()}
	}()
	// The call is waiting when it has recorded its worker.
	for deadline := time.Now().Add(10 * time.Second); ; {
		ws, _ := s.ListWorkers(context.Background())
		if len(ws) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	submitted := time.Now()
	if _, err := c.StartRun(context.Background(), "p", items(3), redrive.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.n == 0 || r.at.Sub(submitted) > 5*time.Second {
		t.Fatalf("got %d items %v after the submit: want them long before the 20 s wait ended", r.n, r.at.Sub(submitted))
	}
}

// TestExternalValidation checks the pipeline and request errors.
func TestExternalValidation(t *testing.T) {
	h := func(context.Context, *redrive.Item) ([]byte, error) { return nil, nil }
	if err := (redrive.Pipeline{Name: "p", Stages: []redrive.Stage{{Name: "a", External: true, Handle: h}}}).Validate(); !errors.Is(err, redrive.ErrInvalidPipeline) {
		t.Errorf("an external stage with a handler: %v", err)
	}
	s := openStore(t)
	c := startClient(t, s, testConfig(nil), redrive.Pipeline{Name: "p", Stages: []redrive.Stage{{Name: "ext", External: true}, {Name: "go", Handle: h}}})
	for _, tc := range []struct {
		req   redrive.ExternalLeaseRequest
		want  error
		field string
	}{
		{redrive.ExternalLeaseRequest{Pipeline: "nope", Stage: "ext", Worker: "w"}, redrive.ErrUnknownPipeline, ""},
		{redrive.ExternalLeaseRequest{Pipeline: "p", Stage: "go", Worker: "w"}, redrive.ErrNotExternal, ""},
		{redrive.ExternalLeaseRequest{Pipeline: "p", Stage: "ext"}, redrive.ErrBadExternalRequest, "worker"},
		{redrive.ExternalLeaseRequest{Pipeline: "p", Stage: "ext", Worker: "w", Max: 1001}, redrive.ErrBadExternalRequest, "max"},
		{redrive.ExternalLeaseRequest{Pipeline: "p", Stage: "ext", Worker: "w", Wait: time.Minute}, redrive.ErrBadExternalRequest, "wait"},
		{redrive.ExternalLeaseRequest{Pipeline: "p", Stage: "ext", Worker: "w", Lease: time.Millisecond}, redrive.ErrBadExternalRequest, "lease"},
	} {
		_, err := c.LeaseExternal(context.Background(), tc.req)
		var fe *redrive.ExternalRequestError
		if !errors.Is(err, tc.want) || tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field) {
			t.Errorf("%+v: %v, want %v on %q", tc.req, err, tc.want, tc.field)
		}
	}
}

// TestExternalBreaker fails an external stage's calls as a dependency in
// an outage would: after 20 failures in a row its breaker opens and
// nothing is handed out, then one probe at a time, and a probe that
// succeeds closes it. The failed probes' items keep their attempts.
func TestExternalBreaker(t *testing.T) {
	s := openStore(t)
	c := startClient(t, s, testConfig(nil), extPipeline("p", redrive.Stage{Policy: fast(100)}))
	if _, err := c.StartRun(context.Background(), "p", items(40), redrive.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	failedInARow := 0
	for failedInARow < 20 {
		for _, l := range lease(t, c, redrive.ExternalLeaseRequest{Max: 20 - failedInARow, Wait: 5 * time.Second}) {
			settle(t, c, failed(l, retry.ClassRetryable, "503 from the dependency", 0))
			failedInARow++
		}
	}
	if ls := lease(t, c, redrive.ExternalLeaseRequest{Max: 10}); len(ls) != 0 {
		t.Fatalf("%d items handed out with the breaker open", len(ls))
	}
	// Half-open after a second: one probe, however many are asked for.
	var probe []redrive.ExternalLease
	for deadline := time.Now().Add(10 * time.Second); len(probe) == 0 && time.Now().Before(deadline); {
		probe = lease(t, c, redrive.ExternalLeaseRequest{Max: 10, Wait: time.Second})
	}
	if len(probe) != 1 {
		t.Fatalf("half-open breaker handed out %d items, want one probe", len(probe))
	}
	if more := lease(t, c, redrive.ExternalLeaseRequest{Max: 10}); len(more) != 0 {
		t.Fatalf("a second probe (%d items) while the first runs", len(more))
	}
	if r := settle(t, c, ok(probe[0], `1`)); !r[0].Applied {
		t.Fatalf("probe result %+v", r)
	}
	if ls := lease(t, c, redrive.ExternalLeaseRequest{Max: 10, Wait: 5 * time.Second}); len(ls) < 2 {
		t.Fatalf("after a successful probe: %d items, want the breaker closed", len(ls))
	}
}
