package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/redrive/redrive"
)

// RequestKey returns the binding of a client's idempotency key, or an error
// wrapping redrive.ErrNotFound.
func (s *Store) RequestKey(ctx context.Context, key string) (redrive.RequestKey, error) {
	k := redrive.RequestKey{Key: key}
	err := s.pool.QueryRow(ctx, `SELECT hash, run_id, created_at FROM `+s.q+`.request_keys WHERE key = $1`, key).
		Scan(&k.Hash, &k.RunID, &k.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return k, fmt.Errorf("postgres: request key %q: %w", key, redrive.ErrNotFound)
	}
	if err != nil {
		return k, s.fail("request key", err)
	}
	k.CreatedAt = k.CreatedAt.UTC()
	return k, nil
}

// BindRequestKey binds k.Key to k.Hash and k.RunID unless the key is bound,
// and returns the binding the key has after. A run that does not exist is
// an error wrapping redrive.ErrNotFound.
func (s *Store) BindRequestKey(ctx context.Context, k redrive.RequestKey) (redrive.RequestKey, error) {
	if k.Key == "" || k.Hash == "" || k.RunID <= 0 {
		return k, errors.New("postgres: bind request key: key, hash and run are required")
	}
	// Two statements, not one: a conflicting insert waits for the
	// transaction that bound the key first, and only a statement that
	// starts after it sees that binding.
	tag, err := s.pool.Exec(ctx, `INSERT INTO `+s.q+`.request_keys (key, hash, run_id, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (key) DO NOTHING`, k.Key, k.Hash, k.RunID, k.CreatedAt)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" { // foreign_key_violation: no such run
		return redrive.RequestKey{}, fmt.Errorf("postgres: bind request key: run %d: %w", k.RunID, redrive.ErrNotFound)
	}
	if err != nil {
		return redrive.RequestKey{}, s.fail("bind request key", err)
	}
	if tag.RowsAffected() == 1 {
		// Bound now, as given (timestamptz keeps microseconds).
		k.CreatedAt = k.CreatedAt.UTC().Round(time.Microsecond)
		return k, nil
	}
	return s.RequestKey(ctx, k.Key)
}
