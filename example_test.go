package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
	"github.com/redrive/redrive/sqlite"
)

// A pipeline of two stages on the embedded SQLite store: one item succeeds,
// one fails finally and lands in the dead-letter queue with its reason, and
// is redriven once the cause is fixed.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "redrive-example-")
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	var fixed atomic.Bool // the cause of the failure, fixed later
	client := redrive.NewClient(store, redrive.Config{Workers: 4, PollInterval: 10 * time.Millisecond, RunCheckInterval: 10 * time.Millisecond})
	err = client.Register(redrive.Pipeline{Name: "summarize", Stages: []redrive.Stage{
		{Name: "fetch", Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
			return []byte(strings.ToUpper(string(it.Payload))), nil
		}},
		{Name: "llm_call", Timeout: 30 * time.Second,
			Policy: retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, Jitter: 0.25},
			Handle: func(ctx context.Context, it *redrive.Item) ([]byte, error) {
				if string(it.Payload) == "BAD" && !fixed.Load() {
					return nil, retry.Final(errors.New("prompt too long"))
				}
				return append(it.Payload, " (summary)"...), nil
			}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := client.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer client.Stop(ctx)

	run, _ := client.StartRun(ctx, "summarize", []redrive.NewItem{{Payload: []byte("good")}, {Payload: []byte("bad")}},
		redrive.RunOptions{FailureBudget: 0.9, MinItems: 2})
	run, _ = client.WaitRun(ctx, run.ID)
	fmt.Println(run.Status, run.Counts.Succeeded, "succeeded,", run.Counts.Dead, "dead")

	dead, _ := store.ListItems(ctx, redrive.ItemFilter{RunID: run.ID, States: []redrive.State{redrive.StateDead}})
	r := dead[0].Reason
	fmt.Printf("dead at %s: %s (%s, %d attempt)\n", r.Stage, r.Error, r.Class, r.Attempts)

	fixed.Store(true)
	n, _ := client.Redrive(ctx, redrive.ItemFilter{RunID: run.ID, Stage: "llm_call"}, redrive.RedriveOptions{})
	run, _ = client.WaitRun(ctx, run.ID)
	fmt.Println("redrove", n, "->", run.Status, run.Counts.Succeeded, "succeeded")
	// Output:
	// partial_success 1 succeeded, 1 dead
	// dead at llm_call: prompt too long (final, 1 attempt)
	// redrove 1 -> completed 2 succeeded
}
