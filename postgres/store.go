package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redrive/redrive"
)

// Options configure a Store. The zero value takes the stated defaults.
type Options struct {
	// Schema is the PostgreSQL schema holding the store's tables. Several
	// stores (and tests) can share one database in different schemas.
	// Default "redrive".
	Schema string
	// Migrate applies pending migrations when the store opens. Default
	// false: run Store.Migrate (the command `redrive migrate`) once per
	// deployment instead.
	Migrate bool
	// MaxConns caps the pool's connections. Default 0: the URL's
	// pool_max_conns, else pgxpool's default (the greater of 4 and the
	// number of CPUs).
	MaxConns int32
	// PollFallback is how often Notifications sends a wake-up while its
	// listening connection is down, so that idle workers keep polling.
	// Default 1 s.
	PollFallback time.Duration
	// VacuumAfter is how many items retention deletes (DeleteSucceeded
	// and DeleteFinishedRuns) between two VACUUMs of the items and
	// attempts tables that the store runs itself, so that the space of
	// deleted and updated rows is reused and the dead entries that claims
	// would walk leave the indexes whether or not the server's autovacuum
	// runs, or keeps up (docs/engine.md, "PostgreSQL over the long haul").
	// The store also vacuums its tables of kept counts (failure_counts
	// and run_counts) after the folds that leave their dead rows, and
	// the outbox every 10,000 delivered notifications retention deletes.
	// Default 0: DefaultVacuumAfter. Negative: never, none of these
	// tables; autovacuum alone.
	VacuumAfter int
}

// DefaultSchema is the schema used when Options.Schema is empty.
const DefaultSchema = "redrive"

// DefaultVacuumAfter is the number of items deleted by retention between
// two VACUUMs the store runs itself when Options.VacuumAfter is 0.
const DefaultVacuumAfter = 500_000

// DefaultPollFallback is the wake-up interval used when
// Options.PollFallback is 0.
const DefaultPollFallback = time.Second

// Store is a redrive.Store on PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	schema  string
	q       string // quoted schema
	channel string // NOTIFY channel
	opts    Options

	completes atomic.Uint64   // Complete calls, to fold run_counts now and then
	retain    retainCursor    // where DeleteSucceeded goes on (retention.go)
	vacuum    vacuumer        // the store's own VACUUMs (vacuum.go)
	side      sideVacuumer    // and of the counts tables and the outbox (sidevacuum.go)
	resume    resumePoints    // where claims resume (claimfrom.go)
	failures  failureCounting // whether bulk actions count failures (failurecounts.go)
}

var (
	_ redrive.Store    = (*Store)(nil)
	_ redrive.Notifier = (*Store)(nil)
	_ redrive.Migrator = (*Store)(nil)
)

// Open connects to the database at url (a postgres:// URL or a DSN that
// pgx understands) and returns a Store using opts.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if opts.PollFallback <= 0 {
		opts.PollFallback = DefaultPollFallback
	}
	if opts.VacuumAfter == 0 {
		opts.VacuumAfter = DefaultVacuumAfter
	}
	if opts.MaxConns < 0 {
		return nil, errors.New("postgres: open: MaxConns must not be negative")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	// The statements' best plans depend on their array and time
	// parameters (batch sizes, how many items are due); PostgreSQL's
	// generic plans, chosen after five executions of a prepared statement,
	// were 10-50x slower for Claim and Complete. Planning takes well under
	// a millisecond. A plan_cache_mode in the URL wins.
	if _, ok := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !ok {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	s := &Store{
		pool:    pool,
		schema:  opts.Schema,
		q:       pgx.Identifier{opts.Schema}.Sanitize(),
		channel: channelName(opts.Schema),
		opts:    opts,
	}
	s.vacuum.ctx, s.vacuum.cancel = context.WithCancel(context.Background())
	if opts.Migrate {
		if err := s.Migrate(ctx); err != nil {
			s.vacuum.cancel()
			pool.Close()
			return nil, err
		}
	}
	return s, nil
}

// channelName is the NOTIFY channel of a schema: redrive_<schema>_due, or
// a hash of the schema when that is longer than an identifier may be.
func channelName(schema string) string {
	c := "redrive_" + schema + "_due"
	if len(c) <= 63 {
		return c
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("redrive_%016x_due", h.Sum64())
}

// Pool returns the store's connection pool, for callers that want to run
// their own statements (and transactions for EnqueueTx) on it.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the store's schema name.
func (s *Store) Schema() string { return s.schema }

// Channel returns the name of the channel the store NOTIFYs when items may
// have become due.
func (s *Store) Channel() string { return s.channel }

// Close closes the pool. Calls in flight finish first.
//
// A VACUUM the store runs in the background (Options.VacuumAfter) is
// canceled.
func (s *Store) Close() error {
	// Under the vacuumer's lock, so that no VACUUM starts (wg.Add) once
	// the wait below began.
	s.vacuum.mu.Lock()
	s.vacuum.cancel()
	s.vacuum.mu.Unlock()
	s.vacuum.wg.Wait()
	s.pool.Close()
	return nil
}

// fail wraps err with the operation. A connection-level failure resets the
// pool: the server probably restarted or killed our backends, and the
// other idle connections are as dead as this one, so the next calls
// reconnect instead of failing one by one.
func (s *Store) fail(op string, err error) error {
	if isConnLoss(err) {
		s.pool.Reset()
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// IsTransient reports whether err is a failure that a retry may cure: a
// lost or refused connection, a server shutting down or starting up, a
// serialization failure or a deadlock. The engine retries such errors on
// its own; IsTransient helps callers of the store's extra methods.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if isConnLoss(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", "55P03":
			return true
		}
	}
	return pgconn.Timeout(err) && !errors.Is(err, context.Canceled)
}

func isConnLoss(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Class 08: connection exception; 57P0x: admin/crash shutdown,
		// cannot connect now.
		return pe.Code[:2] == "08" || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	// pgx reports use of a connection it closed after a fatal error as
	// "conn closed".
	return isConnClosedText(err)
}

func isConnClosedText(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "conn closed" {
			return true
		}
	}
	return false
}
