package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/sqlite"
)

// Open a store (the file is created and migrated), create a run and
// enqueue items. An item whose key the pipeline already holds is not added
// again: Enqueue returns its ID with Existing set.
//
// Most programs do not call CreateRun and Enqueue themselves:
// redrive.Client.StartRun does, and its workers process the items.
func ExampleOpen() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "redrive-sqlite-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	store, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	now := time.Now()
	run, created, err := store.CreateRun(ctx, "summarize", redrive.RunOptions{Name: "nightly"}, now)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("run", run.ID, run.Status, "created:", created)

	enq := func(items ...redrive.NewItem) {
		res, err := store.Enqueue(ctx, redrive.EnqueueRequest{
			RunID: run.ID, Pipeline: "summarize", Stage: "fetch", Items: items, Now: now,
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		for i, e := range res {
			fmt.Printf("key %s: id %d existing %v\n", items[i].Key, e.ID, e.Existing)
		}
	}
	enq(redrive.NewItem{Key: "doc-1", Payload: []byte(`{"id":"doc-1"}`)},
		redrive.NewItem{Key: "doc-2", Payload: []byte(`{"id":"doc-2"}`)})
	enq(redrive.NewItem{Key: "doc-1", Payload: []byte(`{"id":"doc-1"}`)}) // a retried submission

	run, err = store.GetRun(ctx, run.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	c := run.Counts
	fmt.Printf("total %d: pending %d, running %d, succeeded %d, dead %d, canceled %d\n",
		c.Total, c.Pending, c.Running, c.Succeeded, c.Dead, c.Canceled)
	// Output:
	// run 1 running created: true
	// key doc-1: id 1 existing false
	// key doc-2: id 2 existing false
	// key doc-1: id 1 existing true
	// total 2: pending 2, running 0, succeeded 0, dead 0, canceled 0
}

// MigrationStatus lists the schema migrations embedded in the build and
// whether each was applied to the file (Open applies them).
func ExampleStore_MigrationStatus() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "redrive-sqlite-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	store, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	ms, err := store.MigrationStatus(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range ms {
		fmt.Printf("%04d %s applied: %v\n", m.Version, m.Name, m.Applied)
	}
	// Output:
	// 0001 init applied: true
	// 0002 seeds applied: true
	// 0003 ops applied: true
	// 0004 limits applied: true
	// 0005 ready_order applied: true
	// 0008 console applied: true
	// 0009 outbox applied: true
	// 0010 triggers applied: true
	// 0011 callbacks applied: true
	// 0012 action_items applied: true
	// 0013 views applied: true
	// 0014 fingerprints applied: true
	// 0015 failure_counts applied: true
	// 0016 retained applied: true
	// 0017 waiting_only applied: true
	// 0018 attempt_started applied: true
	// 0019 request_keys applied: true
	// 0020 action_marks_by_action applied: true
	// 0021 outbox_output applied: true
	// 0023 pace_waits applied: true
	// 0024 trace_context applied: true
	// 0026 outbox_delivered applied: true
}
