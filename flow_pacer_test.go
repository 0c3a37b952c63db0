package redrive_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/examples/flakyapi/flaky"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/retry/retryhttp"
)

// TestFlowPausesWithoutRetryAfter: a push back without a Retry-After closes the stage's
// gate for 100 ms, as retryhttp.Transport's flow control did before the stage's took
// it over; without the pause the calls whose slots the pace had handed out went on into
// a limit still spent, each one a new round, and cut the rate to 40 % within a second.
// The clock stands still, so the gate is read where the engine left it.
func TestFlowPausesWithoutRetryAfter(t *testing.T) {
	now := time.Now().Add(time.Minute)
	done := make(chan struct{})
	var once sync.Once
	cfg := testConfig(nil)
	cfg.Now = func() time.Time { return now }
	cfg.Observers = []func(redrive.Event){func(ev redrive.Event) {
		if _, ok := ev.(redrive.AttemptFinished); ok {
			once.Do(func() { close(done) })
		}
	}}
	p := redrive.Pipeline{Name: "p", Stages: []redrive.Stage{{Name: "api", Handle: func(context.Context, *redrive.Item) ([]byte, error) {
		return nil, retry.RateLimited(errors.New("429 without Retry-After"), 0)
	}}}}
	c := startClient(t, openStore(t), cfg, p)
	if _, err := c.StartRun(context.Background(), "p", items(1), redrive.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no attempt finished")
	}
	fs := c.FlowStates()
	if len(fs) != 1 || !fs[0].GateClosedUntil.Equal(now.Add(100*time.Millisecond)) {
		t.Fatalf("flow states %+v, want the gate closed until %v", fs, now.Add(100*time.Millisecond))
	}
}

// TestTransportInsideStageLeavesPacingToStage: a Go handler calling through a zero
// retryhttp.Transport inside a stage whose Timeout is 500 ms, 60 items, 12 workers, against
// a healthy flakyapi: no item dies and every attempt reached the server, at the stage's
// defaults and with RateLimit.Off. The transport paces nothing inside the attempt; at the
// defaults it tells the stage that it calls over the network, and the stage's slow start
// ramps by time from 10 calls/s (calls 5 to 15 take most of a second, where the window
// alone lets them through in milliseconds). Before, the transport's slow start waited
// inside the attempt, under its timeout, and items died of calls never sent.
func TestTransportInsideStageLeavesPacingToStage(t *testing.T) {
	for _, tc := range []struct {
		name string
		rl   redrive.RateLimit
	}{{"defaults", redrive.RateLimit{}}, {"off", redrive.RateLimit{Off: true}}} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 60
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			calls := map[string]int{}
			var arrivals []time.Time
			h := flaky.NewHandler(flaky.Options{})
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				var req flaky.Request
				_ = json.Unmarshal(body, &req)
				mu.Lock()
				calls[req.Prompt]++
				arrivals = append(arrivals, time.Now())
				mu.Unlock()
				r.Body = io.NopCloser(bytes.NewReader(body))
				h.ServeHTTP(w, r)
			})}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { srv.Close() })
			url := "http://" + ln.Addr().String() + "/v1/complete"
			hc := &http.Client{Transport: &retryhttp.Transport{}}
			handle := func(ctx context.Context, it *redrive.Item) ([]byte, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(it.Payload))
				if err != nil {
					return nil, retry.Final(err)
				}
				resp, err := hc.Do(req)
				if err != nil {
					return nil, err
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if err := retryhttp.StatusError(resp); err != nil {
					return nil, err
				}
				return b, nil
			}
			s := openStore(t)
			cfg := testConfig(nil)
			cfg.Workers = 12
			p := redrive.Pipeline{Name: "p", Stages: []redrive.Stage{{Name: "api", Timeout: 500 * time.Millisecond, RateLimit: tc.rl, Handle: handle}}}
			c := startClient(t, s, cfg, p)
			its := make([]redrive.NewItem, n)
			for i := range its {
				its[i] = redrive.NewItem{Key: fmt.Sprintf("i%d", i), Payload: []byte(fmt.Sprintf(`{"prompt":"i%d"}`, i))}
			}
			run, err := c.StartRun(context.Background(), "p", its, redrive.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r := wait(t, c, run)
			if r.Counts.Succeeded != n || r.Counts.Dead != 0 {
				t.Errorf("counts %+v, want %d succeeded", r.Counts, n)
			}
			all, err := s.ListItems(context.Background(), redrive.ItemFilter{RunID: run.ID, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, it := range all {
				as, err := s.Attempts(context.Background(), it.ID)
				if err != nil {
					t.Fatal(err)
				}
				if calls[it.Key] != len(as) {
					t.Errorf("item %s: %d attempts, %d requests at the server", it.Key, len(as), calls[it.Key])
				}
			}
			sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].Before(arrivals[j]) })
			spread := arrivals[14].Sub(arrivals[4])
			t.Logf("calls 5 to 15 arrived over %v", spread)
			if tc.name == "defaults" && spread < 600*time.Millisecond {
				t.Errorf("calls 5 to 15 arrived within %v: the stage's slow start did not ramp from 10 calls/s", spread)
			}
		})
	}
}

// TestNetworkStagePausesAfterThreeFailures: a stage whose handler calls through a zero
// retryhttp.Transport pauses (its default breaker opens) after 3 failures in a row, as the
// transport's host did after 3 before the stage's flow control took over; a stage whose
// handler may call nothing over the network keeps the default breaker's 20.
func TestNetworkStagePausesAfterThreeFailures(t *testing.T) {
	var calls atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String() + "/"
	hc := &http.Client{Transport: &retryhttp.Transport{}}
	opened := make(chan int64, 1)
	cfg := testConfig(nil)
	cfg.Workers = 2 // two calls in flight at most: the count at the opening is the threshold's
	cfg.Observers = []func(redrive.Event){func(ev redrive.Event) {
		if b, ok := ev.(redrive.BreakerChanged); ok && b.To == retry.BreakerOpen {
			select {
			case opened <- calls.Load():
			default:
			}
		}
	}}
	p := redrive.Pipeline{Name: "p", Stages: []redrive.Stage{{Name: "api", Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, retry.Final(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		return nil, retryhttp.StatusError(resp)
	}}}}
	c := startClient(t, openStore(t), cfg, p)
	if _, err := c.StartRun(context.Background(), "p", items(30), redrive.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-opened:
		// 3 failures, and at most one more call under way beside the third.
		if n > 4 {
			t.Fatalf("the breaker opened after %d calls, want 3 failures in a row (and one in flight)", n)
		}
		t.Logf("breaker opened after %d calls", n)
	case <-time.After(30 * time.Second):
		t.Fatalf("the breaker did not open; %d calls", calls.Load())
	}
}
