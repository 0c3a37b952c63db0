package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/redrive/redrive"
)

// RoundsResult is what `redrive bench --rounds N` measured: the no-op
// benchmark repeated on one store whose succeeded items retention deletes
// as they finish, so that the last round runs on a store that has worked
// N × --items items. A non-nil progress is told of each round as it ends.
type RoundsResult struct {
	Rounds    []Result `json:"rounds"`
	Processed int      `json:"items_processed"`
	// Sizes is the database's size in bytes after each round (see dbSize).
	Sizes []int64 `json:"db_bytes"`
	// Held is how many succeeded items the store still held after each
	// round: retention's backlog, which stays small while it keeps pace.
	Held []int `json:"succeeded_held"`
	// Ratio is the last round's work rate over the first round's.
	Ratio float64 `json:"last_over_first"`
}

// Rounds works items no-op items (see Noop) rounds times on store, whose
// succeeded items retention deletes as they finish (Config.Retention 1 ns,
// checked every second), and measures each round, the database's size
// after it (in PostgreSQL schema schema) and the succeeded items still
// held. A non-nil progress is told of each round as it ends.
func Rounds(ctx context.Context, store redrive.Store, schema string, progress io.Writer, rounds, items, stages, workers, batch int) (RoundsResult, error) {
	var rs RoundsResult
	for range rounds {
		r, err := Noop(ctx, store, schema, items, stages, workers, batch, time.Nanosecond, nil)
		if err != nil {
			return rs, err
		}
		rs.Rounds = append(rs.Rounds, r)
		rs.Processed += items
		size, err := dbSize(ctx, store, schema)
		if err != nil {
			return rs, err
		}
		rs.Sizes = append(rs.Sizes, size)
		held, err := store.Count(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateSucceeded}})
		if err != nil {
			return rs, err
		}
		rs.Held = append(rs.Held, held)
		if progress != nil {
			printRound(progress, len(rs.Rounds)-1, r, size, held)
		}
	}
	rs.Ratio = rs.Rounds[len(rs.Rounds)-1].ItemsPerSecond / rs.Rounds[0].ItemsPerSecond
	return rs, nil
}

// PrintRounds writes rs, measured on store, as `redrive bench --rounds`
// prints it.
func PrintRounds(w io.Writer, store string, rs RoundsResult) {
	fmt.Fprintf(w, "store              %s\n", store)
	for i, r := range rs.Rounds {
		printRound(w, i, r, rs.Sizes[i], rs.Held[i])
	}
	fmt.Fprintf(w, "processed          %d items; last round / first round: %.2f\n", rs.Processed, rs.Ratio)
}

func printRound(w io.Writer, i int, r Result, size int64, held int) {
	fmt.Fprintf(w, "round %-3d          insert %.0f items/s  work %.0f items/s  %.0f stage completions/s  database %.1f MB  succeeded held %d\n",
		i+1, r.InsertPerSecond, r.ItemsPerSecond, r.StageCompletionsPS, float64(size)/1e6, held)
}
