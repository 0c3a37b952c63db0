package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// connect opens the pool's first connection. A connection applies its
// pragmas as it opens, and switching a new file to WAL takes a lock that
// SQLite does not wait for through busy_timeout: when two processes open a
// new file at once, one of them meets SQLITE_BUSY there. connect retries
// that for as long as busy_timeout would have waited.
func connect(ctx context.Context, db *sql.DB, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	for {
		err := db.PingContext(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY or one of its extended
// codes.
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}
