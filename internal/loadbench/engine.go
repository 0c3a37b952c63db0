package loadbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry/retryhttp"
	"github.com/redrive/redrive/sqlite"
)

// PipelineName and StageName name the benchmark's one-stage pipeline.
const (
	PipelineName = "overload"
	StageName    = "call"
)

// Pipeline returns the benchmark's pipeline: one stage at its defaults whose handler
// POSTs the item's payload to url through hc, with the item's key as Idempotency-Key (so
// that the transport may retry it) and as X-Item (so that the server counts calls per item).
func Pipeline(hc *http.Client, url string) redrive.Pipeline {
	return redrive.Pipeline{Name: PipelineName, Stages: []redrive.Stage{{Name: StageName, Handle: CallHandler(hc, url)}}}
}

// CallHandler is the stage handler of Pipeline.
func CallHandler(hc *http.Client, url string) redrive.Handler {
	return func(ctx context.Context, item *redrive.Item) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(item.Payload))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", item.Key)
		req.Header.Set("X-Item", item.Key)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err := retryhttp.StatusError(resp); err != nil {
			return nil, err
		}
		return body, rerr
	}
}

// Items returns n items keyed i0, i1, ... with a small JSON payload.
func Items(n int) []redrive.NewItem {
	items := make([]redrive.NewItem, n)
	for i := range items {
		key := fmt.Sprintf("i%d", i)
		items[i] = redrive.NewItem{Key: key, Payload: []byte(`{"prompt":"` + key + `"}`)}
	}
	return items
}

// runEngine works items with the Go engine on a fresh SQLite file, its handler calling
// through a zero retryhttp.Transport shared by all workers; observers, if any, receive
// the engine's events.
func runEngine(ctx context.Context, url string, items, workers int, observers ...func(redrive.Event)) (counts, error) {
	dir, err := os.MkdirTemp("", "redrive-overload-")
	if err != nil {
		return counts{}, err
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "bench.db"))
	if err != nil {
		return counts{}, err
	}
	defer store.Close()
	hc := &http.Client{Transport: benchTransport()}
	client := redrive.NewClient(store, redrive.Config{Workers: workers, Observers: observers})
	if err := client.Register(Pipeline(hc, url)); err != nil {
		return counts{}, err
	}
	run, err := client.StartRun(ctx, PipelineName, Items(items), redrive.RunOptions{})
	if err != nil {
		return counts{}, err
	}
	if err := client.Start(ctx); err != nil {
		return counts{}, err
	}
	run, werr := client.WaitRun(ctx, run.ID)
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Stop(sctx); err != nil {
		return counts{}, err
	}
	if werr != nil && !errors.Is(werr, context.DeadlineExceeded) {
		return counts{}, werr
	}
	run, err = store.GetRun(sctx, run.ID)
	if err != nil {
		return counts{}, err
	}
	return counts{succeeded: run.Counts.Succeeded, dead: run.Counts.Dead, canceled: run.Counts.Canceled}, nil
}
