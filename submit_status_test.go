package redrive_test

import (
	"context"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// TestSubmitCounts checks the run Submit returns on each store: its counts
// include the items added (new pending, invalid dead, existing keys not
// again), and a finished run that receives items is running again.
func TestSubmitCounts(t *testing.T) {
	eachStore(t, func(t *testing.T, s redrive.Store) {
		ctx := context.Background()
		now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
		run, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{Name: "r"}, now)
		if err != nil {
			t.Fatal(err)
		}
		items := []redrive.NewItem{{Key: "a", Payload: []byte("1")}, {Key: "b", Payload: []byte("2")}, {Key: "bad", Invalid: "not JSON"}}
		after, res, err := redrive.Submit(ctx, s, run, "first", items, now)
		if err != nil || len(res) != 3 {
			t.Fatalf("Submit = %v, %v", res, err)
		}
		if c := after.Counts; c.Total != 3 || c.Pending != 2 || c.Dead != 1 || after.Status != redrive.RunRunning {
			t.Fatalf("after the first submit: %s %+v", after.Status, c)
		}
		if ok, err := s.FinishRun(ctx, run.ID, redrive.RunFailed, "done", now); err != nil || !ok {
			t.Fatalf("FinishRun = %v, %v", ok, err)
		}
		// As the API does: the run read again, then a retried batch with one
		// new item.
		run, _, err = s.CreateRun(ctx, "p", redrive.RunOptions{Name: "r"}, now)
		if err != nil {
			t.Fatal(err)
		}
		after, res, err = redrive.Submit(ctx, s, run, "first", append(items, redrive.NewItem{Key: "c", Payload: []byte("3")}), now)
		if err != nil || !res[0].Existing || res[3].Existing {
			t.Fatalf("Submit again = %+v, %v", res, err)
		}
		if c := after.Counts; c.Total != 4 || c.Pending != 3 || c.Dead != 1 || after.Status != redrive.RunRunning {
			t.Fatalf("after the second submit: %s %+v", after.Status, c)
		}
		stored, err := s.GetRun(ctx, run.ID)
		if err != nil || stored.Counts != after.Counts || stored.Status != redrive.RunRunning {
			t.Fatalf("stored run %+v, %v; Submit returned %+v", stored, err, after)
		}
	})
}
