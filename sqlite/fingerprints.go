package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/redrive/redrive"
)

// backfillBatch is how many rows one backfill transaction fingerprints:
// small enough that a writer waiting behind it waits milliseconds.
const backfillBatch = 2000

// backfillFingerprints stores the fingerprint of the failures written
// before migration 0014 (or by a build without it), a batch per
// transaction, until none is left. The *_fingerprint_todo indexes hold
// exactly those rows, so a store with none left pays one index probe per
// table.
func (s *Store) backfillFingerprints(ctx context.Context) error {
	for _, t := range []struct{ sel, upd string }{
		{`SELECT id, reason_error FROM items WHERE reason_error IS NOT NULL AND reason_fingerprint IS NULL ORDER BY id LIMIT ?`,
			`UPDATE items SET reason_fingerprint = ? WHERE id = ?`},
		{`SELECT id, error FROM attempts WHERE outcome <> 'succeeded' AND fingerprint IS NULL ORDER BY id LIMIT ?`,
			`UPDATE attempts SET fingerprint = ? WHERE id = ?`},
	} {
		for {
			n := 0
			err := s.writeTx(ctx, "backfill fingerprints", func(tx *sql.Tx) error {
				rows, err := tx.QueryContext(ctx, t.sel, backfillBatch)
				if err != nil {
					return err
				}
				type row struct {
					id  int64
					msg string
				}
				var todo []row
				for rows.Next() {
					var r row
					if err := rows.Scan(&r.id, &r.msg); err != nil {
						rows.Close()
						return err
					}
					todo = append(todo, r)
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return err
				}
				upd, err := tx.PrepareContext(ctx, t.upd)
				if err != nil {
					return err
				}
				defer upd.Close()
				for _, r := range todo {
					if _, err := upd.ExecContext(ctx, redrive.Fingerprint(r.msg), r.id); err != nil {
						return err
					}
				}
				n = len(todo)
				return nil
			})
			if err != nil {
				return fmt.Errorf("sqlite: backfill fingerprints: %w", err)
			}
			if n < backfillBatch {
				break
			}
		}
	}
	return nil
}
