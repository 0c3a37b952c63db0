package loadbench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestServerAccounting: the token-bucket server lets the burst through, answers the rest
// 429 with Retry-After, and its windows, totals and connection count add up to what the
// client sent.
func TestServerAccounting(t *testing.T) {
	srv, err := StartServer(ServerOptions{Rate: 1, Burst: 5, RetryAfter: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	send := func(hc *http.Client, n int) (ok, limited int) {
		for range n {
			resp, err := hc.Post(srv.URL+"/v1", "application/json", nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				ok++
			case 429:
				limited++
				if ra := resp.Header.Get("Retry-After"); ra != "2" {
					t.Errorf("Retry-After %q, want 2 (1.5 s rounded up)", ra)
				}
			}
		}
		return ok, limited
	}
	keep := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer keep.CloseIdleConnections()
	ok, limited := send(keep, 10)
	// 1 per second refills at most one token during the few milliseconds of the test.
	if ok < 5 || ok > 6 || ok+limited != 10 {
		t.Errorf("ok %d limited %d, want the burst of 5 (or 6) and the rest 429", ok, limited)
	}
	closing := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	send(closing, 4)
	tot := Totals(srv.Rec.Windows())
	if tot.Arrivals != 14 || tot.OK+tot.Limited != 14 || tot.OK < 5 {
		t.Errorf("totals %+v, want 14 arrivals, all 200 or 429", tot)
	}
	if c := srv.Conns(); c != 5 {
		t.Errorf("%d connections, want 1 kept alive + 4 closed after each request", c)
	}
	if m := MaxArrivals(srv.Rec.Windows()); m < 1 || m > 14 {
		t.Errorf("max window %d", m)
	}
}

// TestRecorderWindows: arrivals land in the window of their time, keys count calls per
// logical request, and a time range selects calls.
func TestRecorderWindows(t *testing.T) {
	t0 := time.Unix(100, 0)
	r := NewRecorder(t0, 100*time.Millisecond)
	r.Arrive(t0.Add(50*time.Millisecond), "a")
	r.Arrive(t0.Add(150*time.Millisecond), "a")
	r.Arrive(t0.Add(160*time.Millisecond), "b")
	r.Answer(t0.Add(160*time.Millisecond), 429)
	r.Answer(t0.Add(350*time.Millisecond), 200)
	ws := r.Windows()
	if len(ws) != 4 || ws[0].Arrivals != 1 || ws[1].Arrivals != 2 || ws[1].Limited != 1 || ws[3].OK != 1 {
		t.Fatalf("windows %+v", ws)
	}
	if keys, calls := r.Keys(); keys != 2 || calls != 3 {
		t.Errorf("keys %d calls %d", keys, calls)
	}
	if keys, calls := r.KeysBetween(100*time.Millisecond, 200*time.Millisecond); keys != 2 || calls != 2 {
		t.Errorf("between: keys %d calls %d", keys, calls)
	}
	if d := ActiveSpan(ws, 100*time.Millisecond); d != 400*time.Millisecond {
		t.Errorf("span %v", d)
	}
}

// TestOverloadSmoke runs the naive and engine variants on a small scale: every item is
// accounted for and the server saw at least one request per success.
func TestOverloadSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs servers and an engine for a few seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := Overload(ctx, OverloadOptions{Items: 60, Workers: 8, Rate: 100, Burst: 10, Variants: []string{VariantNaive, VariantEngine}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Succeeded+r.Dead+r.Canceled+r.Unfinished != r.Items || r.Unfinished != 0 {
			t.Errorf("%s: %+v do not add up to %d items", r.Name, r, r.Items)
		}
		if ok := Totals(r.Windows).OK; ok < r.Succeeded || r.Requests() < r.Items {
			t.Errorf("%s: %d 2xx and %d requests for %d succeeded of %d items", r.Name, ok, r.Requests(), r.Succeeded, r.Items)
		}
		if r.Conns < 1 || r.SuccessRate() <= 0 {
			t.Errorf("%s: conns %d rate %v", r.Name, r.Conns, r.SuccessRate())
		}
	}
}

// TestServeProcess: the server of --server-process says where it listens, records the
// send stamp of a request beside its arrival, and reports its windows when its input
// closes.
func TestServeProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := ServeProcess(ctx, ServerOptions{Rate: 10, Burst: 1}, inR, outW)
		outW.CloseWithError(err)
		done <- err
	}()
	dec := json.NewDecoder(outR)
	var h serverHello
	if err := dec.Decode(&h); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	req, _ := http.NewRequest(http.MethodPost, h.URL+"/v1", nil)
	req.Header.Set(SentHeader, strconv.FormatInt(sent.UnixNano(), 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	inW.Close()
	var rep serverReport
	if err := dec.Decode(&rep); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tot := Totals(rep.Windows); tot.Arrivals != 1 || tot.OK != 1 || rep.Conns != 1 {
		t.Errorf("report %+v, want one request let through on one connection", rep)
	}
	if len(rep.Stamps) != 1 || rep.Stamps[0].Sent != sent.Sub(time.Unix(0, h.Start)) || rep.Stamps[0].Arrived < rep.Stamps[0].Sent {
		t.Errorf("stamps %+v, want the one request sent at %v after the start, arriving after", rep.Stamps, sent.Sub(time.Unix(0, h.Start)))
	}
}
