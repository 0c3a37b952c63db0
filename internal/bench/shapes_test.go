package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/internal/pgtest"
	"github.com/redrive/redrive/postgres"
)

// BenchmarkPostgresShapes splits what BenchmarkPostgresComponents leaves
// after its indexes and triggers: the shape of the store's statements.
// On the store's own schema, every index and trigger in place, it claims
// and completes componentsItems items in batches of 2,000, one goroutine,
// with the store's Claim or the audited loop's claim (the same walk of
// items_ready, returning only ID and token, or every column as the store
// does), and with the store's Complete or the audited loop's completion
// (one UPDATE by ID and token, one narrow attempt row each). The server
// CPU per item of each side tells which of the store's statements costs
// what the audited loop's does not.
//
//	go test ./internal/bench -run '^$' -bench PostgresShapes -benchtime 1x
func BenchmarkPostgresShapes(b *testing.B) {
	for _, v := range []struct {
		name            string
		claim, complete string
	}{
		{"store_claim/store_complete", "store", "store"},
		{"bare_claim/store_complete", "bare", "store"},
		{"bare_claim_all_columns/store_complete", "bare_all", "store"},
		{"store_claim/bare_complete", "store", "bare"},
		{"bare_claim/bare_complete", "bare", "bare"},
	} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				url, schema := pgtest.NewSchema(b)
				s := pgtest.OpenStoreAt(b, url, schema)
				shapesRun(b, s, schema, v.claim, v.complete)
			}
		})
	}
}

// shapesRun is componentsRun with the claim and the completion each
// either the store's ("store") or the audited loop's ("bare", "bare_all").
func shapesRun(b *testing.B, s *postgres.Store, schema, claimShape, completeShape string) {
	ctx := context.Background()
	const batch = 2000
	componentsFill(b, s)
	q := pgx.Identifier{schema}.Sanitize()
	// The bare claim returns what the audited loop's does, or every
	// column of the row (the store's claim returns 29 of its 32).
	cols := "id, lease_token"
	if claimShape == "bare_all" {
		cols = "id, lease_token, *"
	}
	// A leased item stays pending, its lease alone marking it running, as
	// in the store (migration 0029).
	bareClaim := `UPDATE ` + q + `.items SET lease_token = lease_token + 1, lease_owner = 'c',
		lease_expires_at = $2
		WHERE ctid = ANY(ARRAY(SELECT c.ctid FROM ` + q + `.items c WHERE c.state = 'pending' AND c.ready
			AND c.lease_expires_at IS NULL AND c.next_at <= $3 AND c.pipeline = 'p'
			ORDER BY c.priority DESC, c.order_at, c.id LIMIT $1 FOR UPDATE SKIP LOCKED))
		RETURNING ` + cols
	bareComplete := `WITH done AS (
			UPDATE ` + q + `.items i SET state = 'succeeded', lease_token = i.lease_token + 1, lease_owner = '',
				lease_expires_at = NULL, updated_at = $3
			FROM unnest($1::bigint[], $2::bigint[]) AS c(id, token)
			WHERE i.id = c.id AND i.lease_token = c.token AND c.token % 2 = 1
			RETURNING i.id, i.run_id, i.pipeline)
		INSERT INTO ` + q + `.attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, started_at, finished_at)
		SELECT id, run_id, pipeline, 'a', 0, 1, 'succeeded', $3, $3 FROM done`
	pool := s.Pool()
	var claimServer, doneServer time.Duration
	b.ResetTimer()
	for left := componentsItems; left > 0; {
		now := time.Now()
		m := startCPU(ctx, s, schema)
		var ids, tokens []int64
		if claimShape == "store" {
			ls, err := s.Claim(ctx, redrive.ClaimRequest{Owner: "c", Pipelines: []string{"p"}, Limit: batch,
				LeaseUntil: now.Add(time.Minute), Now: now})
			if err != nil {
				b.Fatal(err)
			}
			for _, l := range ls {
				ids, tokens = append(ids, l.Item.ID), append(tokens, l.Token)
			}
		} else {
			rows, err := pool.Query(ctx, bareClaim, batch, now.Add(time.Minute), now)
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					b.Fatal(err)
				}
				ids, tokens = append(ids, vals[0].(int64)), append(tokens, vals[1].(int64))
			}
			if err := rows.Err(); err != nil {
				b.Fatal(err)
			}
		}
		_, server := m.stop(ctx)
		claimServer += server
		if len(ids) == 0 {
			b.Fatalf("%d items left, none claimed", left)
		}
		m = startCPU(ctx, s, schema)
		if completeShape == "store" {
			cs := make([]redrive.Completion, len(ids))
			for i := range ids {
				cs[i] = componentsSuccess(ids[i], tokens[i], now)
			}
			applied, err := s.Complete(ctx, cs)
			if err != nil {
				b.Fatal(err)
			}
			for i, ok := range applied {
				if !ok {
					b.Fatalf("completion of item %d not applied", ids[i])
				}
			}
		} else {
			tag, err := pool.Exec(ctx, bareComplete, ids, tokens, now)
			if err != nil {
				b.Fatal(err)
			}
			if int(tag.RowsAffected()) != len(ids) {
				b.Fatalf("%d of %d completions applied", tag.RowsAffected(), len(ids))
			}
		}
		_, server = m.stop(ctx)
		doneServer += server
		left -= len(ids)
	}
	b.StopTimer()
	b.ReportMetric(perItem(claimServer, componentsItems), "claim-server-µs/item")
	b.ReportMetric(perItem(doneServer, componentsItems), "complete-server-µs/item")
	b.ReportMetric(0, "ns/op")
}
