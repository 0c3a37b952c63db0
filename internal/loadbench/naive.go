package loadbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// NaiveDelay is the naive loop's fixed wait after a failed call.
const NaiveDelay = 100 * time.Millisecond

// runNaive is the loop everyone writes first: workers goroutines take items and call until
// they get a 2xx, waiting a fixed NaiveDelay after anything else. Its connections are pooled
// (one idle connection per worker kept), so that only its retry behaviour differs.
func runNaive(ctx context.Context, url string, items, workers int) (counts, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = workers
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	next := make(chan int)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				for ctx.Err() == nil {
					if naiveCall(ctx, hc, url, i) {
						ok.Add(1)
						break
					}
					wait(ctx, NaiveDelay)
				}
			}
		}()
	}
feed:
	for i := range items {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return counts{succeeded: int(ok.Load())}, nil
}

func naiveCall(ctx context.Context, hc *http.Client, url string, i int) bool {
	key := fmt.Sprintf("i%d", i)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"prompt":"`+key+`"}`))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Item", key)
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}
