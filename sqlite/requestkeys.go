package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/redrive/redrive"
)

// RequestKey returns the binding of a client's idempotency key, or an error
// wrapping redrive.ErrNotFound.
func (s *Store) RequestKey(ctx context.Context, key string) (redrive.RequestKey, error) {
	k := redrive.RequestKey{Key: key}
	var at int64
	err := s.r.QueryRowContext(ctx, `SELECT hash, run_id, created_at FROM request_keys WHERE key = ?`, key).Scan(&k.Hash, &k.RunID, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return k, fmt.Errorf("sqlite: request key %q: %w", key, redrive.ErrNotFound)
	}
	if err != nil {
		return k, fmt.Errorf("sqlite: request key: %w", err)
	}
	k.CreatedAt = ntz(at)
	return k, nil
}

// BindRequestKey binds k.Key to k.Hash and k.RunID unless the key is bound,
// and returns the binding the key has after. A run that does not exist is
// an error wrapping redrive.ErrNotFound.
func (s *Store) BindRequestKey(ctx context.Context, k redrive.RequestKey) (redrive.RequestKey, error) {
	if k.Key == "" || k.Hash == "" || k.RunID <= 0 {
		return k, errors.New("sqlite: bind request key: key, hash and run are required")
	}
	out := redrive.RequestKey{Key: k.Key}
	err := s.writeTx(ctx, "bind request key", func(tx *sql.Tx) error {
		// The SELECT's WHERE also settles the parse of ON CONFLICT after
		// INSERT ... SELECT.
		if _, err := tx.ExecContext(ctx, `INSERT INTO request_keys (key, hash, run_id, created_at)
			SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM runs WHERE id = ?)
			ON CONFLICT (key) DO NOTHING`, k.Key, k.Hash, k.RunID, tnz(k.CreatedAt), k.RunID); err != nil {
			return err
		}
		var at int64
		err := tx.QueryRowContext(ctx, `SELECT hash, run_id, created_at FROM request_keys WHERE key = ?`, k.Key).Scan(&out.Hash, &out.RunID, &at)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: bind request key: run %d: %w", k.RunID, redrive.ErrNotFound)
		}
		out.CreatedAt = ntz(at)
		return err
	})
	if err != nil {
		return redrive.RequestKey{}, err
	}
	return out, nil
}
