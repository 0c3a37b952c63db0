// Package sqlite is a redrive.Store on an embedded SQLite database: one file,
// nothing to install. It uses the pure-Go driver modernc.org/sqlite.
//
// The store keeps two connection pools on the same file: a single connection
// for writes, so that writers in one process queue in Go instead of fighting
// for SQLite's write lock, and a pool for reads, which in WAL mode run
// concurrently with the writer. Write transactions start with BEGIN IMMEDIATE,
// so that several processes sharing a file wait on busy_timeout rather than
// failing on a lock upgrade.
//
// The schema is created and upgraded by versioned migrations embedded in the
// package, applied in one transaction when the store opens; MigrationStatus
// reports them.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redrive/redrive"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Options configure a Store. Zero values take the stated defaults.
type Options struct {
	// BusyTimeout is how long a connection waits for a lock held by another
	// connection or process before failing with SQLITE_BUSY. Default 5s.
	BusyTimeout time.Duration
	// MaxReadConns caps the pool of read connections. Default: the number
	// of CPUs, at least 2 and at most 8.
	MaxReadConns int
	// CacheSizeKiB is SQLite's page cache per connection, in KiB.
	// Default 32768 (32 MiB).
	CacheSizeKiB int
	// MmapSize is how many bytes of the file SQLite maps into memory.
	// Default 256 MiB. Negative disables memory mapping.
	MmapSize int64
	// JournalSizeLimit caps the size the WAL file is truncated to after a
	// checkpoint, in bytes. Default 64 MiB.
	JournalSizeLimit int64
	// WALAutoCheckpoint is how many WAL pages a commit may leave before the
	// writer checkpoints them into the database file. Default 10000 (about
	// 40 MiB with 4 KiB pages), ten times SQLite's own default: under a
	// steady stream of small batches, hot pages are copied back once per
	// checkpoint rather than many times, which measured about 20% less CPU
	// per completion.
	WALAutoCheckpoint int
	// SynchronousFull sets synchronous=FULL, which makes every commit
	// durable across power loss at a cost in write throughput. Default
	// false: synchronous=NORMAL, durable across process crashes; a power
	// loss may roll back the last commits but never corrupts the file.
	SynchronousFull bool
}

// Defaults of Options.
const (
	DefaultBusyTimeout       = 5 * time.Second
	DefaultCacheSizeKiB      = 32 << 10
	DefaultMmapSize          = 256 << 20
	DefaultJournalSizeLimit  = 64 << 20
	DefaultWALAutoCheckpoint = 10000
)

func (o Options) withDefaults() Options {
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.MaxReadConns <= 0 {
		o.MaxReadConns = min(max(runtime.NumCPU(), 2), 8)
	}
	if o.CacheSizeKiB <= 0 {
		o.CacheSizeKiB = DefaultCacheSizeKiB
	}
	if o.MmapSize == 0 {
		o.MmapSize = DefaultMmapSize
	}
	if o.MmapSize < 0 {
		o.MmapSize = 0
	}
	if o.JournalSizeLimit <= 0 {
		o.JournalSizeLimit = DefaultJournalSizeLimit
	}
	if o.WALAutoCheckpoint <= 0 {
		o.WALAutoCheckpoint = DefaultWALAutoCheckpoint
	}
	return o
}

// Store is a redrive.Store on a SQLite file. It is safe for concurrent use.
type Store struct {
	w     *sql.DB // exactly one connection: all writes
	r     *sql.DB // reads
	path  string
	stmts stmtCache // prepared on w

	sinceCheckpoint atomic.Int64 // items deleted since the last checkpoint (see deleted)
}

var (
	_ redrive.Store    = (*Store)(nil)
	_ redrive.Migrator = (*Store)(nil)
)

// Open opens the SQLite database at path, creating the file when it does not
// exist, and applies pending migrations. At most one Options value may be
// given; without one the defaults apply. The path must name a file (":memory:"
// is not supported, since reads and writes use separate connections); it must
// not contain '?'.
func Open(ctx context.Context, path string, opts ...Options) (*Store, error) {
	if len(opts) > 1 {
		return nil, errors.New("sqlite: open: at most one Options")
	}
	if path == "" || path == ":memory:" || strings.Contains(path, "?") {
		return nil, fmt.Errorf("sqlite: open: unsupported path %q", path)
	}
	var o Options
	if len(opts) == 1 {
		o = opts[0]
	}
	o = o.withDefaults()

	w, err := sql.Open("sqlite", dsn(path, o, true))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := connect(ctx, w, o.BusyTimeout); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s := &Store{w: w, path: path, stmts: stmtCache{db: w}}
	if err := s.migrate(ctx); err != nil {
		w.Close()
		return nil, err
	}
	if err := s.backfillFingerprints(ctx); err != nil {
		w.Close()
		return nil, err
	}
	r, err := sql.Open("sqlite", dsn(path, o, false))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(o.MaxReadConns)
	r.SetMaxIdleConns(o.MaxReadConns)
	r.SetConnMaxLifetime(0)
	r.SetConnMaxIdleTime(0)
	if err := connect(ctx, r, o.BusyTimeout); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.r = r
	return s, nil
}

// dsn builds the driver's data source name. Every pragma is applied to each
// new connection by the driver.
func dsn(path string, o Options, write bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(o.BusyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	if o.SynchronousFull {
		q.Add("_pragma", "synchronous(FULL)")
	} else {
		q.Add("_pragma", "synchronous(NORMAL)")
	}
	q.Add("_pragma", "cache_size(-"+strconv.Itoa(o.CacheSizeKiB)+")")
	q.Add("_pragma", "mmap_size("+strconv.FormatInt(o.MmapSize, 10)+")")
	q.Add("_pragma", "temp_store(MEMORY)")
	if write {
		q.Add("_pragma", "journal_size_limit("+strconv.FormatInt(o.JournalSizeLimit, 10)+")")
		q.Add("_pragma", "wal_autocheckpoint("+strconv.Itoa(o.WALAutoCheckpoint)+")")
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	return path + "?" + q.Encode()
}

// Close closes both connection pools.
func (s *Store) Close() error {
	var errs []error
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	s.stmts.close()
	if s.w != nil {
		// Fold the WAL into the database file so that the file is
		// complete on its own; failure is harmless.
		_, _ = s.w.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
		errs = append(errs, s.w.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlite: close: %w", err)
	}
	return nil
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// writeTx runs fn in a write transaction (BEGIN IMMEDIATE on the single
// write connection) and commits when fn returns nil.
func (s *Store) writeTx(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: %s: begin: %w", op, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		if strings.HasPrefix(err.Error(), "sqlite: ") {
			return err
		}
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: %s: commit: %w", op, err)
	}
	return nil
}

// readTx runs fn in a read transaction, so that its queries see one
// snapshot.
func (s *Store) readTx(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("sqlite: %s: begin: %w", op, err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		if strings.HasPrefix(err.Error(), "sqlite: ") {
			return err
		}
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return nil
}

// Time encoding: INTEGER unix nanoseconds in UTC; the zero time is NULL.

func tn(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func tnz(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func nt(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

func ntz(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
