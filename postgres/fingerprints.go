package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// backfillBatch is how many rows one backfill transaction fingerprints:
// each batch locks only its own rows, for milliseconds, so the backfill of
// a big table runs beside live workers.
const backfillBatch = 2000

// backfillFingerprints stores the fingerprint of the failures written
// before migration 0014 (or by a build without it, during a rolling
// upgrade), a batch per transaction, until none is left. The
// *_fingerprint_todo indexes hold exactly those rows, so a store with none
// left pays one index probe per table. Processes that open the store at the
// same time share the work: each skips the rows another has locked.
func (s *Store) backfillFingerprints(ctx context.Context) error {
	for _, t := range []struct{ sel, upd string }{
		{`SELECT id, reason_error FROM ` + s.q + `.items WHERE reason_error IS NOT NULL AND reason_fingerprint IS NULL
			ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`,
			`UPDATE ` + s.q + `.items i SET reason_fingerprint = u.fp FROM unnest($1::bigint[], $2::text[]) AS u(id, fp)
				WHERE i.id = u.id AND i.id = ANY($1::bigint[])`},
		{`SELECT id, error FROM ` + s.q + `.attempts WHERE outcome <> 'succeeded' AND fingerprint IS NULL
			ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`,
			`UPDATE ` + s.q + `.attempts a SET fingerprint = u.fp FROM unnest($1::bigint[], $2::text[]) AS u(id, fp)
				WHERE a.id = u.id AND a.id = ANY($1::bigint[])`},
	} {
		for {
			n := 0
			err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, t.sel, backfillBatch)
				if err != nil {
					return err
				}
				var ids []int64
				var fps []string
				var id int64
				var msg string
				if _, err := pgx.ForEachRow(rows, []any{&id, &msg}, func() error {
					ids = append(ids, id)
					fps = append(fps, redrive.Fingerprint(msg))
					return nil
				}); err != nil {
					return err
				}
				n = len(ids)
				if n == 0 {
					return nil
				}
				// Written by ID as a bulk action writes (see bulkPlan).
				if _, err := tx.Exec(ctx, bulkPlan); err != nil {
					return err
				}
				_, err = tx.Exec(ctx, t.upd, ids, fps)
				return err
			})
			if err != nil {
				return s.fail("backfill fingerprints", err)
			}
			if n < backfillBatch {
				break
			}
		}
	}
	return nil
}
