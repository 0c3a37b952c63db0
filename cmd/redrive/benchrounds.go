package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/redrive/redrive"
)

// roundsResult is what `redrive bench --rounds N` measured: the no-op
// benchmark repeated on one store whose succeeded items retention deletes
// as they finish, so that the last round runs on a store that has worked
// N × --items items.
type roundsResult struct {
	Rounds    []benchResult `json:"rounds"`
	Processed int           `json:"items_processed"`
	// Ratio is the last round's work rate over the first round's.
	Ratio float64 `json:"last_over_first"`
}

func runRounds(ctx context.Context, store redrive.Store, rounds, items, stages, workers, batch int) (roundsResult, error) {
	var rs roundsResult
	for range rounds {
		r, err := runBench(ctx, store, items, stages, workers, batch, time.Nanosecond)
		if err != nil {
			return rs, err
		}
		rs.Rounds = append(rs.Rounds, r)
		rs.Processed += items
	}
	rs.Ratio = rs.Rounds[len(rs.Rounds)-1].ItemsPerSecond / rs.Rounds[0].ItemsPerSecond
	return rs, nil
}

func printRounds(w io.Writer, store string, rs roundsResult) {
	fmt.Fprintf(w, "store              %s\n", store)
	for i, r := range rs.Rounds {
		fmt.Fprintf(w, "round %-3d          insert %.0f items/s  work %.0f items/s  %.0f stage completions/s\n",
			i+1, r.InsertPerSecond, r.ItemsPerSecond, r.StageCompletionsPS)
	}
	fmt.Fprintf(w, "processed          %d items; last round / first round: %.2f\n", rs.Processed, rs.Ratio)
}
