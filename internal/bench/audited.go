package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
	"github.com/redrive/redrive/sqlite"
)

// AuditedLoops is how many loops the audited bare loop runs at once.
const AuditedLoops = 4

// Audited measures the audited bare loop on the server or file of store:
// what a queue that keeps an audit trail must do at the least, with no
// engine around it. It fills a table of n jobs (id, state, due time, lease
// token, owner and expiry, payload, update time; a primary key and an
// index on (due_at, id) of the pending jobs) and works them with loops
// goroutines, each repeating two steps until every job is done:
//
//   - claim up to batch due jobs in due order with one statement, UPDATE …
//     WHERE id IN (SELECT … ORDER BY due_at, id LIMIT batch FOR UPDATE SKIP
//     LOCKED) RETURNING id, lease_token (on SQLite, which has one writer,
//     without SKIP LOCKED, in a write transaction);
//   - in one transaction, mark them done where their lease token is still
//     the claim's, and insert one attempt row each (a table with a primary
//     key and an index on (job_id, id), as redrive's attempts).
//
// It returns jobs worked per second and where their time went. On PostgreSQL the tables live in
// schema and are dropped after; on SQLite they live in a file of their own
// beside the store's, removed after, opened with the store's settings.
func Audited(ctx context.Context, store redrive.Store, schema string, n, batch, loops int, payload []byte) (float64, Cost, error) {
	switch s := store.(type) {
	case *postgres.Store:
		return auditedPostgres(ctx, s, schema, n, batch, loops, payload, "")
	case *sqlite.Store:
		return auditedSQLite(ctx, s, n, batch, loops, payload)
	}
	return 0, Cost{}, errors.New("bench: the audited bare loop needs PostgreSQL or SQLite")
}

// auditedWide is DDL that gives the audited loop's job table (bare_jobs)
// the width of redrive's items rows on the claim path: the columns a
// claim and a completion carry along unchanged (run, pipeline, stage,
// counters, times; 160 bytes a row against 72) and the indexes every
// claim or completion enters besides the primary key (by run and state,
// by lease expiry, succeeded by update time). The components benchmark
// runs the loop on it to price a narrow table of active items: what the
// row's width costs apart from its indexes (docs/BENCHMARKS.md).
const auditedWide = `ALTER TABLE bare_jobs ADD COLUMN run_id bigint NOT NULL DEFAULT 1,
		ADD COLUMN pipeline text NOT NULL DEFAULT 'bench', ADD COLUMN stage text NOT NULL DEFAULT 'work',
		ADD COLUMN stage_index int NOT NULL DEFAULT 0, ADD COLUMN priority int NOT NULL DEFAULT 0,
		ADD COLUMN attempt int NOT NULL DEFAULT 0, ADD COLUMN rate_limit_waits int NOT NULL DEFAULT 0,
		ADD COLUMN enqueued_at timestamptz NOT NULL DEFAULT now(), ADD COLUMN next_at timestamptz NOT NULL DEFAULT now(),
		ADD COLUMN failed_attempts int NOT NULL DEFAULT 0, ADD COLUMN order_at timestamptz NOT NULL DEFAULT now(),
		ADD COLUMN ready bool NOT NULL DEFAULT true, ADD COLUMN lease_losses int NOT NULL DEFAULT 0`

// auditedWideIndexes are the indexes of auditedWide.
const auditedWideIndexes = `CREATE INDEX ON bare_jobs (run_id, state, id);
	CREATE INDEX ON bare_jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
	CREATE INDEX ON bare_jobs (updated_at) WHERE state = 'succeeded'`

// auditedPostgres runs the audited loop on PostgreSQL; shape, DDL run in
// schema after the tables are made and before they are filled, changes
// them for the components benchmark ("" for the loop as documented).
func auditedPostgres(ctx context.Context, s *postgres.Store, schema string, n, batch, loops int, payload []byte, shape string) (float64, Cost, error) {
	pool := s.Pool()
	q := pgx.Identifier{schema}.Sanitize()
	jobs, attempts := q+".bare_jobs", q+".bare_attempts"
	drop := `DROP TABLE IF EXISTS ` + jobs + `, ` + attempts
	defer func() { _, _ = pool.Exec(context.Background(), drop) }()
	if _, err := pool.Exec(ctx, drop+`;
		CREATE TABLE `+jobs+` (id bigint PRIMARY KEY, state text NOT NULL, due_at timestamptz NOT NULL,
			lease_token bigint NOT NULL DEFAULT 0, lease_owner text, lease_expires_at timestamptz,
			payload bytea, updated_at timestamptz NOT NULL);
		CREATE INDEX ON `+jobs+` (due_at, id) WHERE state = 'pending';
		CREATE TABLE `+attempts+` (id bigserial PRIMARY KEY, job_id bigint NOT NULL, number int NOT NULL,
			outcome text NOT NULL, started_at timestamptz NOT NULL, finished_at timestamptz NOT NULL);
		CREATE INDEX ON `+attempts+` (job_id, id)`); err != nil {
		return 0, Cost{}, fmt.Errorf("bench: audited bare loop: %w", err)
	}
	if shape != "" {
		if _, err := pool.Exec(ctx, `SET search_path TO `+q+`; `+shape+`; RESET search_path`); err != nil {
			return 0, Cost{}, fmt.Errorf("bench: audited bare loop: shape: %w", err)
		}
	}
	now := time.Now()
	rows := make([][]any, n)
	for i := range rows {
		rows[i] = []any{int64(i + 1), "pending", now, payload, now}
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{schema, "bare_jobs"},
		[]string{"id", "state", "due_at", "payload", "updated_at"}, pgx.CopyFromRows(rows)); err != nil {
		return 0, Cost{}, fmt.Errorf("bench: audited bare loop: fill: %w", err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+jobs); err != nil {
		return 0, Cost{}, fmt.Errorf("bench: audited bare loop: %w", err)
	}
	// The plans are redrive's (postgres/work.go): the claim walks the due
	// index and stops after its LIMIT, the ids it locked probing the
	// primary key (= ANY(ARRAY(…)) rather than IN (…), which was planned
	// as a hash join over a scan of every job: 280 ms per claim of 2,000
	// out of 200,000); the completion joins its jobs to the primary key
	// in a nested loop, with no condition on the jobs alone for the
	// planner to misjudge. Fencing is by lease token, odd exactly while a
	// job runs: the claim and the completion each add 1.
	claim := `UPDATE ` + jobs + ` SET state = 'running', lease_token = lease_token + 1, lease_owner = 'bare',
		lease_expires_at = now() + interval '1 minute', updated_at = now()
		WHERE id = ANY(ARRAY(SELECT id FROM ` + jobs + ` WHERE state = 'pending' AND due_at <= now()
			ORDER BY due_at, id LIMIT $1 FOR UPDATE SKIP LOCKED))
		RETURNING id, lease_token`
	const plan = `SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
		set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`
	complete := `WITH done AS (
			UPDATE ` + jobs + ` j SET state = 'succeeded', lease_token = j.lease_token + 1, lease_owner = NULL,
				lease_expires_at = NULL, updated_at = now()
			FROM unnest($1::bigint[], $2::bigint[]) AS c(id, token)
			WHERE j.id = c.id AND j.lease_token = c.token AND c.token % 2 = 1
			RETURNING j.id)
		INSERT INTO ` + attempts + ` (job_id, number, outcome, started_at, finished_at)
		SELECT id, 1, 'succeeded', now(), now() FROM done`
	return auditedRun(ctx, s, schema, n, loops, func(ctx context.Context, t *callTimer) (int, error) {
		start := time.Now()
		rows, err := pool.Query(ctx, claim, batch)
		if err != nil {
			return 0, err
		}
		var ids, tokens []int64
		var id, token int64
		if _, err := pgx.ForEachRow(rows, []any{&id, &token}, func() error {
			ids, tokens = append(ids, id), append(tokens, token)
			return nil
		}); err != nil {
			return 0, err
		}
		t.claim.Add(int64(time.Since(start)))
		if len(ids) == 0 {
			return 0, nil
		}
		t.claims.Add(1)
		t.completes.Add(1)
		defer func(start time.Time) { t.complete.Add(int64(time.Since(start))) }(time.Now())
		// One implicit transaction: the settings end with it.
		b := &pgx.Batch{}
		b.Queue(plan)
		b.Queue(complete, ids, tokens)
		br := pool.SendBatch(ctx, b)
		_, err = br.Exec()
		var tag pgconn.CommandTag
		if err == nil {
			tag, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, err
		}
		if int(tag.RowsAffected()) != len(ids) {
			return 0, fmt.Errorf("%d of %d completions applied", tag.RowsAffected(), len(ids))
		}
		return len(ids), nil
	})
}

func auditedSQLite(ctx context.Context, s *sqlite.Store, n, batch, loops int, payload []byte) (float64, Cost, error) {
	path := s.Path() + "-audited"
	defer func() {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(path + suffix)
		}
	}()
	// The settings of the store's write connection (see sqlite.Open).
	v := url.Values{}
	for _, p := range []string{"busy_timeout(5000)", "journal_mode(WAL)", "synchronous(NORMAL)", "cache_size(-32768)",
		"mmap_size(268435456)", "temp_store(MEMORY)", "journal_size_limit(67108864)", "wal_autocheckpoint(10000)"} {
		v.Add("_pragma", p)
	}
	v.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", path+"?"+v.Encode())
	if err != nil {
		return 0, Cost{}, fmt.Errorf("bench: audited bare loop: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one writer, as the store has
	if _, err := db.ExecContext(ctx, `
		CREATE TABLE bare_jobs (id INTEGER PRIMARY KEY, state TEXT NOT NULL, due_at INTEGER NOT NULL,
			lease_token INTEGER NOT NULL DEFAULT 0, lease_owner TEXT, lease_expires_at INTEGER,
			payload BLOB, updated_at INTEGER NOT NULL);
		CREATE INDEX bare_jobs_due ON bare_jobs (due_at, id) WHERE state = 'pending';
		CREATE TABLE bare_attempts (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, number INTEGER NOT NULL,
			outcome TEXT NOT NULL, started_at INTEGER NOT NULL, finished_at INTEGER NOT NULL);
		CREATE INDEX bare_attempts_job ON bare_attempts (job_id, id)`); err != nil {
		return 0, Cost{}, fmt.Errorf("bench: audited bare loop: %w", err)
	}
	now := time.Now().UnixNano()
	if _, err := db.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
		INSERT INTO bare_jobs (id, state, due_at, payload, updated_at) SELECT i, 'pending', ?2, ?3, ?2 FROM n`,
		n, now, payload); err != nil {
		return 0, Cost{}, fmt.Errorf("bench: audited bare loop: fill: %w", err)
	}
	claim, err := db.PrepareContext(ctx, `UPDATE bare_jobs SET state = 'running', lease_token = lease_token + 1,
		lease_owner = 'bare', lease_expires_at = ?1 + 60000000000, updated_at = ?1
		WHERE id IN (SELECT id FROM bare_jobs WHERE state = 'pending' AND due_at <= ?1 ORDER BY due_at, id LIMIT ?2)
		RETURNING id, lease_token`)
	if err != nil {
		return 0, Cost{}, fmt.Errorf("bench: audited bare loop: %w", err)
	}
	defer claim.Close()
	// The completion statements of a batch of k jobs, by k.
	type pair struct{ done, record *sql.Stmt }
	stmts := map[int]pair{}
	defer func() {
		for _, p := range stmts {
			p.done.Close()
			p.record.Close()
		}
	}()
	prepare := func(k int) (pair, error) {
		if p, ok := stmts[k]; ok {
			return p, nil
		}
		vals := strings.TrimSuffix(strings.Repeat("(?, ?), ", k), ", ")
		done, err := db.PrepareContext(ctx, `UPDATE bare_jobs SET state = 'succeeded', lease_owner = NULL,
			lease_expires_at = NULL, updated_at = ?
			FROM (VALUES `+vals+`) AS c WHERE bare_jobs.id = c.column1 AND bare_jobs.lease_token = c.column2
				AND bare_jobs.state = 'running'
			RETURNING bare_jobs.id`)
		if err != nil {
			return pair{}, err
		}
		record, err := db.PrepareContext(ctx, `INSERT INTO bare_attempts (job_id, number, outcome, started_at, finished_at)
			VALUES `+strings.TrimSuffix(strings.Repeat("(?, 1, 'succeeded', ?, ?), ", k), ", "))
		if err != nil {
			done.Close()
			return pair{}, err
		}
		stmts[k] = pair{done, record}
		return stmts[k], nil
	}
	// The loops share the one write connection, as the store's claimer and
	// completers do; the statements are prepared by the loop that meets a
	// batch size first, under mu.
	var mu sync.Mutex
	return auditedRun(ctx, s, "", n, loops, func(ctx context.Context, t *callTimer) (int, error) {
		var ids, tokens []int64
		start := time.Now()
		now := start.UnixNano()
		if err := sqliteTx(ctx, db, func(tx *sql.Tx) error {
			rows, err := tx.StmtContext(ctx, claim).QueryContext(ctx, now, batch)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id, token int64
				if err := rows.Scan(&id, &token); err != nil {
					return err
				}
				ids, tokens = append(ids, id), append(tokens, token)
			}
			return rows.Err()
		}); err != nil {
			return 0, err
		}
		t.claim.Add(int64(time.Since(start)))
		if len(ids) == 0 {
			return 0, nil
		}
		t.claims.Add(1)
		t.completes.Add(1)
		defer func(start time.Time) { t.complete.Add(int64(time.Since(start))) }(time.Now())
		mu.Lock()
		p, err := prepare(len(ids))
		mu.Unlock()
		if err != nil {
			return 0, err
		}
		args := make([]any, 0, 1+2*len(ids))
		args = append(args, time.Now().UnixNano())
		for i := range ids {
			args = append(args, ids[i], tokens[i])
		}
		applied := 0
		err = sqliteTx(ctx, db, func(tx *sql.Tx) error {
			rows, err := tx.StmtContext(ctx, p.done).QueryContext(ctx, args...)
			if err != nil {
				return err
			}
			rec := make([]any, 0, 3*len(ids))
			end := time.Now().UnixNano()
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				rec = append(rec, id, now, end)
				applied++
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if applied != len(ids) {
				return fmt.Errorf("%d of %d completions applied", applied, len(ids))
			}
			_, err = tx.StmtContext(ctx, p.record).ExecContext(ctx, rec...)
			return err
		})
		return applied, err
	})
}

// sqliteTx runs fn in a write transaction of db and commits.
func sqliteTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// auditedRun runs loops goroutines that each call step until n jobs are
// done, and returns jobs per second and their cost on store. A step
// returns how many jobs it did, and adds the time of its claim and its
// completion to the timer.
func auditedRun(ctx context.Context, store redrive.Store, schema string, n, loops int, step func(context.Context, *callTimer) (int, error)) (float64, Cost, error) {
	var timer callTimer
	var done atomic.Int64
	errs := make(chan error, loops)
	meter := startCPU(ctx, store, schema)
	start := time.Now()
	for range loops {
		go func() {
			for done.Load() < int64(n) {
				k, err := step(ctx, &timer)
				if err != nil {
					errs <- err
					return
				}
				done.Add(int64(k))
			}
			errs <- nil
		}()
	}
	var err error
	for range loops {
		err = errors.Join(err, <-errs)
	}
	elapsed := time.Since(start)
	if err != nil {
		return 0, Cost{}, fmt.Errorf("bench: audited bare loop: %w", err)
	}
	c := timer.cost(n)
	meter.allocs(&c, n)
	self, server := meter.stop(ctx)
	c.ProcessCPU, c.ServerCPU = perItem(self, n), perItem(server, n)
	return float64(n) / elapsed.Seconds(), c, nil
}
