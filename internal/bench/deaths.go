package bench

import (
	"context"
	"fmt"
	"io"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
)

// ShapeDeaths is the benchmark of items that die: a stage whose every
// attempt fails with a final error, against the same items succeeding,
// alternated on the same store.
const ShapeDeaths = "deaths"

// DeathsResult is what `redrive bench --shape deaths` measured: two runs
// of --items items that all die in their first attempt and two that all
// succeed, in the order success, death, death, success.
type DeathsResult struct {
	Store   string `json:"store"`
	Items   int    `json:"items"`
	Workers int    `json:"workers"`
	Batch   int    `json:"batch"`
	// Deaths and Successes are the runs, in the order each kind ran.
	Deaths    []Result `json:"deaths"`
	Successes []Result `json:"successes"`
	// DeathsPerSecond and SuccessesPerSecond are the means of their runs'
	// rates, and Ratio the first over the second.
	DeathsPerSecond    float64 `json:"deaths_per_second"`
	SuccessesPerSecond float64 `json:"successes_per_second"`
	Ratio              float64 `json:"deaths_over_successes"`
}

// errSchema is the failure of every attempt of the deaths benchmark, with
// a number and a quoted name in its message as handlers' errors have.
var errSchema = retry.Final(fmt.Errorf("schema mismatch: field %q missing", "total"))

// Deaths measures how fast items die against how fast the same items
// succeed on store (of PostgreSQL schema schema): each item's one attempt
// fails with a final error whose message names the item, so every death
// is fingerprinted, grouped, counted and recorded with its attempt.
func Deaths(ctx context.Context, store redrive.Store, schema string, items, workers, batch int) (DeathsResult, error) {
	res := DeathsResult{Items: items, Workers: workers, Batch: Batch(batch, workers)}
	die := func(_ context.Context, it *redrive.Item) ([]byte, error) {
		return nil, fmt.Errorf("order %d: %w", it.ID, errSchema)
	}
	for _, dies := range []bool{false, true, true, false} {
		var h redrive.Handler
		if dies {
			h = die
		}
		r, err := work(ctx, store, schema, items, 1, workers, batch, 0, nil, h)
		if err != nil {
			return res, err
		}
		if dies {
			res.Deaths = append(res.Deaths, r)
		} else {
			res.Successes = append(res.Successes, r)
		}
	}
	res.DeathsPerSecond = meanRate(res.Deaths)
	res.SuccessesPerSecond = meanRate(res.Successes)
	res.Ratio = res.DeathsPerSecond / res.SuccessesPerSecond
	return res, nil
}

func meanRate(rs []Result) float64 {
	sum := 0.0
	for _, r := range rs {
		sum += r.ItemsPerSecond
	}
	return sum / float64(len(rs))
}

// PrintDeaths writes res as `redrive bench --shape deaths` prints it.
func PrintDeaths(w io.Writer, res DeathsResult) {
	fmt.Fprintf(w, "store              %s\n", res.Store)
	fmt.Fprintf(w, "items              %d per run, %d workers, claim batch %d; runs: success, death, death, success\n",
		res.Items, res.Workers, res.Batch)
	line := func(name string, r Result) {
		fmt.Fprintf(w, "%-19s%.2fs  %.0f items/s  µs CPU per item %.1f here", name, r.WorkSeconds, r.ItemsPerSecond, r.Engine.ProcessCPU)
		if r.Engine.ServerCPU > 0 {
			fmt.Fprintf(w, " + %.1f server", r.Engine.ServerCPU)
		}
		fmt.Fprintln(w)
	}
	for i, r := range res.Successes {
		line(fmt.Sprintf("successes, run %d", i+1), r)
	}
	for i, r := range res.Deaths {
		line(fmt.Sprintf("deaths, run %d", i+1), r)
	}
	fmt.Fprintf(w, "deaths / successes %.2f  (%.0f against %.0f items/s)\n", res.Ratio, res.DeathsPerSecond, res.SuccessesPerSecond)
}
