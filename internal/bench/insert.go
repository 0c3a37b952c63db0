package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
)

// InsertRoundsResult is what InsertRounds measured: per round, the engine's
// insert rate over COPY's, each taken next to the other.
type InsertRoundsResult struct {
	Ratios []float64 `json:"insert_over_copy_rounds"`
	Median float64   `json:"insert_over_copy_median"`
}

// InsertRounds measures the engine's insert of n items (one StartRun,
// as the bench's insert) against COPY of n rows of the items' shape,
// rounds times, alternating which goes first. It works in a scratch
// schema of its own, emptied between rounds so that every round inserts
// into an empty table as the bench's insert does, and dropped after. On a
// shared machine a single pair of figures swung by a fifth either way;
// the median of alternated pairs does not.
func InsertRounds(ctx context.Context, url string, n, rounds int) (InsertRoundsResult, error) {
	var res InsertRoundsResult
	schema := "redrive_bench_insert_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pg, err := postgres.Open(ctx, url, postgres.Options{Schema: schema})
	if err != nil {
		return res, fmt.Errorf("bench: insert rounds: %w", err)
	}
	defer pg.Close()
	if err := pg.Migrate(ctx); err != nil {
		return res, fmt.Errorf("bench: insert rounds: %w", err)
	}
	var store redrive.Store = pg
	q := pgx.Identifier{schema}.Sanitize()
	defer func() { _, _ = pg.Pool().Exec(context.Background(), "DROP SCHEMA IF EXISTS "+q+" CASCADE") }()
	client := redrive.NewClient(store, redrive.Config{})
	noop := func(_ context.Context, it *redrive.Item) ([]byte, error) { return it.Payload, nil }
	if err := client.Register(redrive.Pipeline{Name: "bench", Stages: []redrive.Stage{{Name: "stage1", Handle: noop}}}); err != nil {
		return res, err
	}
	in := make([]redrive.NewItem, n)
	for i := range in {
		in[i] = redrive.NewItem{Payload: []byte(`{}`)}
	}
	insert := func() (float64, error) {
		start := time.Now()
		if _, err := client.StartRun(ctx, "bench", in, redrive.RunOptions{}); err != nil {
			return 0, err
		}
		return float64(n) / time.Since(start).Seconds(), nil
	}
	for r := range rounds {
		var ins, cp float64
		if r%2 == 0 {
			if cp, err = pg.CopyRate(ctx, n, []byte(`{}`)); err == nil {
				ins, err = insert()
			}
		} else {
			if ins, err = insert(); err == nil {
				cp, err = pg.CopyRate(ctx, n, []byte(`{}`))
			}
		}
		if err != nil {
			return res, err
		}
		res.Ratios = append(res.Ratios, ins/cp)
		if _, err := pg.Pool().Exec(ctx, "TRUNCATE "+q+".items CASCADE"); err != nil {
			return res, err
		}
	}
	s := slices.Sorted(slices.Values(res.Ratios))
	res.Median = s[len(s)/2]
	if len(s)%2 == 0 {
		res.Median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return res, nil
}
