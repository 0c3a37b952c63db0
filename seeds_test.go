package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
)

// adr0010Steps are the steps of ADR-0010's processing job.
var adr0010Steps = []string{"s3_read", "llm_call", "validate", "s3_write", "db_update"}

// scripted is a handler that fails each stage as many times as the item's
// input says ({"fail": {"llm_call": 2}}), then succeeds; a stage listed
// under "final" fails finally. calls counts its calls by item key and stage.
type scripted struct {
	mu    sync.Mutex
	calls map[string]int
}

func (s *scripted) handler(stage string) redrive.Handler {
	return func(_ context.Context, it *redrive.Item) ([]byte, error) {
		var in struct {
			Fail  map[string]int `json:"fail"`
			Final string         `json:"final"`
		}
		if err := json.Unmarshal(it.Input, &in); err != nil {
			return nil, retry.Final(err)
		}
		s.mu.Lock()
		s.calls[it.Key+"/"+stage]++
		n := s.calls[it.Key+"/"+stage]
		s.mu.Unlock()
		if in.Final == stage {
			return nil, retry.Final(fmt.Errorf("%s: schema validation failed", stage))
		}
		if n <= in.Fail[stage] {
			return nil, fmt.Errorf("%s: transient failure %d", stage, n)
		}
		return it.Payload, nil
	}
}

func (s *scripted) count(key, stage string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[key+"/"+stage]
}

// TestAttemptCapAcrossStagesADR0010 runs ADR-0010's job, five steps with
// "4 total attempts (initial + 3 retries)" for the job, each step's own
// policy allowing 3 attempts. A retry resumes at the step that failed, and
// the job's attempts are counted across the steps: three failures spread
// over three steps still succeed on the fourth attempt, a fourth failure is
// dead although its step had attempts left, and the same item without the
// cap succeeds.
func TestAttemptCapAcrossStagesADR0010(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		sc := &scripted{calls: map[string]int{}}
		job := func(name string, cap int) redrive.Pipeline {
			p := redrive.Pipeline{Name: name, MaxAttempts: cap}
			for _, st := range adr0010Steps {
				p.Stages = append(p.Stages, redrive.Stage{Name: st, Policy: fast(3), Handle: sc.handler(st)})
			}
			return p
		}
		c := startClient(t, s, testConfig(nil), job("job", 4), job("nocap", 0))
		in := func(key, script string) redrive.NewItem { return redrive.NewItem{Key: key, Payload: []byte(script)} }
		four := `{"fail": {"llm_call": 2, "s3_write": 1, "db_update": 1}}`
		run, err := c.StartRun(context.Background(), "job", []redrive.NewItem{
			in("clean", `{}`),
			in("three", `{"fail": {"llm_call": 1, "s3_write": 1, "db_update": 1}}`),
			in("four", four),
			in("final", `{"final": "validate"}`),
		}, redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		control, err := c.StartRun(context.Background(), "nocap", []redrive.NewItem{in("nocap-four", four)}, redrive.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := wait(t, c, run)
		if r.Counts.Succeeded != 2 || r.Counts.Dead != 2 {
			t.Fatalf("run counts %+v, want 2 succeeded and 2 dead", r.Counts)
		}
		if rc := wait(t, c, control); rc.Counts.Succeeded != 1 {
			t.Fatalf("without a cap the four-failure item must succeed (each step allows 3 attempts): %+v", rc.Counts)
		}
		got, err := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID})
		if err != nil {
			t.Fatal(err)
		}
		byKey := map[string]redrive.Item{}
		for _, it := range got {
			byKey[it.Key] = it
		}
		history := func(id int64) string {
			as, err := s.Attempts(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, a := range as {
				out = append(out, a.Stage+":"+string(a.Outcome))
			}
			return strings.Join(out, " ")
		}

		// Successes do not count: five steps pass on the first attempt.
		if it := byKey["clean"]; it.State != redrive.StateSucceeded || it.FailedAttempts != 0 {
			t.Errorf("clean item: %s with %d failed attempts", it.State, it.FailedAttempts)
		}
		// Attempts 1-3 fail at three different steps; attempt 4 succeeds.
		if it := byKey["three"]; it.State != redrive.StateSucceeded || it.FailedAttempts != 3 {
			t.Errorf("three-failure item: %s with %d failed attempts, want succeeded with 3", it.State, it.FailedAttempts)
		}
		// The fourth failure ends the job at db_update's first attempt.
		it := byKey["four"]
		if it.State != redrive.StateDead || it.FailedAttempts != 4 || it.Reason == nil {
			t.Fatalf("four-failure item: %s with %d failed attempts, reason %+v; want dead with 4", it.State, it.FailedAttempts, it.Reason)
		}
		const wantReason = "attempt cap of 4 across stages reached: db_update: transient failure 1"
		if r := it.Reason; r.Stage != "db_update" || r.Class != "retryable" || r.Error != wantReason || r.Attempts != 1 {
			t.Errorf("reason %+v, want stage db_update, class retryable, 1 attempt, error %q", *r, wantReason)
		}
		want := "s3_read:succeeded llm_call:retry llm_call:retry llm_call:succeeded validate:succeeded " +
			"s3_write:retry s3_write:succeeded db_update:dead"
		if h := history(it.ID); h != want {
			t.Errorf("history\n got %s\nwant %s", h, want)
		}
		if n := sc.count("four", "db_update"); n != 1 {
			t.Errorf("db_update called %d times for the capped item, want 1", n)
		}
		// A final error is dead at once, whatever the cap.
		if it := byKey["final"]; it.State != redrive.StateDead || it.Reason == nil || it.Reason.Class != "final" ||
			strings.Contains(it.Reason.Error, "attempt cap") || it.FailedAttempts != 1 {
			t.Errorf("final item: %+v", it)
		}
	})
}

// TestCountRateLimitWaits shows the stage option that makes a rate-limited
// failure use up an attempt (ADR-0010 counts HTTP 429 among its retriable
// errors) while still waiting as long as the dependency asked, and the
// default, where such waits use up no attempt. Counted waits also count
// towards the pipeline's cap.
func TestCountRateLimitWaits(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		var counted, free, capped atomic.Int64
		const retryAfter = 40 * time.Millisecond
		limited := func(n *atomic.Int64) redrive.Handler {
			return func(_ context.Context, it *redrive.Item) ([]byte, error) {
				n.Add(1)
				return nil, retry.RateLimited(errors.New("429 too many requests"), retryAfter)
			}
		}
		pol := fast(3)
		pol.MaxRateLimitWaits = 2
		// Flow control off: this test is about how an item's own waits
		// count; with it on, a stage that every call pushes back lets its
		// items wait for free for RateLimit.MaxLimited (flow_test.go).
		off := redrive.RateLimit{Off: true}
		c := startClient(t, s, testConfig(nil),
			redrive.Pipeline{Name: "counted", Stages: []redrive.Stage{{Name: "llm", Policy: pol, CountRateLimitWaits: true, RateLimit: off, Handle: limited(&counted)}}},
			redrive.Pipeline{Name: "free", Stages: []redrive.Stage{{Name: "llm", Policy: pol, RateLimit: off, Handle: limited(&free)}}},
			redrive.Pipeline{Name: "capped", MaxAttempts: 2, Stages: []redrive.Stage{
				{Name: "fetch", Policy: fast(3), Handle: func(_ context.Context, it *redrive.Item) ([]byte, error) {
					if it.Attempt == 0 {
						return nil, errors.New("connection reset")
					}
					return it.Payload, nil
				}},
				{Name: "llm", Policy: pol, CountRateLimitWaits: true, RateLimit: off, Handle: limited(&capped)},
			}},
		)
		ids := map[string]int64{}
		for _, name := range []string{"counted", "free", "capped"} {
			run, err := c.StartRun(context.Background(), name, items(1), redrive.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r := wait(t, c, run)
			if r.Counts.Dead != 1 {
				t.Fatalf("%s: counts %+v, want 1 dead", name, r.Counts)
			}
			got, err := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID})
			if err != nil || len(got) != 1 {
				t.Fatal(got, err)
			}
			ids[name] = got[0].ID
		}
		// Counted: 3 calls, as the policy's 3 attempts allow; each retry
		// waited for Retry-After, not for the policy's 1 ms backoff.
		if n := counted.Load(); n != 3 {
			t.Errorf("counted: %d calls, want 3", n)
		}
		as, err := s.Attempts(context.Background(), ids["counted"])
		if err != nil || len(as) != 3 {
			t.Fatalf("counted attempts %+v %v", as, err)
		}
		for i, a := range as[:2] {
			if a.Outcome != redrive.OutcomeRetry || a.Class != "rate_limited" || a.Number != i+1 || a.Delay < retryAfter {
				t.Errorf("counted attempt %d = %s %s #%d delay %v; want retry rate_limited #%d with delay >= %v",
					i, a.Outcome, a.Class, a.Number, a.Delay, i+1, retryAfter)
			}
		}
		it, err := s.GetItem(context.Background(), ids["counted"])
		if err != nil || it.Reason == nil || it.Reason.Class != "rate_limited" || it.Reason.Attempts != 3 {
			t.Errorf("counted item %+v %v", it, err)
		}
		// Default: 2 free waits (MaxRateLimitWaits) before the 3 attempts.
		if n := free.Load(); n != 5 {
			t.Errorf("free: %d calls, want 5 (2 free waits, then 3 attempts)", n)
		}
		// Capped: fetch's failure was attempt 1, the counted 429 at llm
		// ends attempt 2.
		if n := capped.Load(); n != 1 {
			t.Errorf("capped: llm called %d times, want 1", n)
		}
		it, err = s.GetItem(context.Background(), ids["capped"])
		if err != nil || it.Reason == nil || it.Reason.Stage != "llm" || it.FailedAttempts != 2 ||
			!strings.HasPrefix(it.Reason.Error, "attempt cap of 2 across stages reached: ") {
			t.Errorf("capped item %+v %v", it, err)
		}
	})
}

// TestConfigHashRecordedAcrossRestarts records attempts under one stage
// configuration, restarts with a changed policy, and again with the first
// one: each attempt carries the hash of the configuration that made it, the
// changed policy gives a different hash, and the same configuration gives
// the same hash after a restart.
func TestConfigHashRecordedAcrossRestarts(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		stage := func(pol retry.Policy, h redrive.Handler) redrive.Stage {
			return redrive.Stage{Name: "work", Policy: pol, Timeout: time.Minute, Handle: h}
		}
		ok := func(_ context.Context, it *redrive.Item) ([]byte, error) { return it.Payload, nil }
		broken := func(context.Context, *redrive.Item) ([]byte, error) {
			return nil, retry.Final(errors.New("bad prompt"))
		}
		v1, v2 := fast(3), fast(3)
		v2.MaxAttempts = 5
		h1, h2 := stage(v1, ok).ConfigHash(), stage(v2, ok).ConfigHash()
		if h1 == h2 || len(h1) != 16 {
			t.Fatalf("hashes %q and %q: a changed policy must change the 16-digit hash", h1, h2)
		}
		session := func(st redrive.Stage, f func(c *redrive.Client)) {
			c := redrive.NewClient(s, testConfig(nil))
			if err := c.Register(redrive.Pipeline{Name: "p", Stages: []redrive.Stage{st}}); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			f(c)
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := c.Stop(sctx); err != nil {
				t.Fatal(err)
			}
		}
		var first redrive.Run
		session(stage(v1, broken), func(c *redrive.Client) {
			var err error
			if first, err = c.StartRun(ctx, "p", items(1), redrive.RunOptions{}); err != nil {
				t.Fatal(err)
			}
			if r := wait(t, c, first); r.Counts.Dead != 1 {
				t.Fatalf("first session: %+v", r.Counts)
			}
		})
		// The fix ships with a changed policy; the dead item is redriven.
		session(stage(v2, ok), func(c *redrive.Client) {
			if n, err := c.Redrive(ctx, redrive.ItemFilter{RunID: first.ID}, redrive.RedriveOptions{}); err != nil || n != 1 {
				t.Fatalf("redrive = %d, %v", n, err)
			}
			if r := wait(t, c, first); r.Counts.Succeeded != 1 {
				t.Fatalf("second session: %+v", r.Counts)
			}
		})
		// Back to the first configuration, in a new client.
		var third redrive.Run
		session(stage(v1, ok), func(c *redrive.Client) {
			var err error
			if third, err = c.StartRun(ctx, "p", items(1), redrive.RunOptions{}); err != nil {
				t.Fatal(err)
			}
			wait(t, c, third)
		})
		hashes := func(run redrive.Run) []string {
			its, err := s.ListItems(ctx, redrive.ItemFilter{RunID: run.ID})
			if err != nil || len(its) != 1 {
				t.Fatal(its, err)
			}
			as, err := s.Attempts(ctx, its[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, a := range as {
				out = append(out, string(a.Outcome)+":"+a.ConfigHash)
			}
			return out
		}
		if got, want := strings.Join(hashes(first), " "), "dead:"+h1+" succeeded:"+h2; got != want {
			t.Errorf("history of the redriven item: %s, want %s", got, want)
		}
		if got, want := strings.Join(hashes(third), " "), "succeeded:"+h1; got != want {
			t.Errorf("after restarting with the first configuration: %s, want %s", got, want)
		}
	})
}
