package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// UpsertWorker inserts or replaces the row of w.Owner in the workers table.
func (s *Store) UpsertWorker(ctx context.Context, w redrive.Worker) error {
	if w.Owner == "" {
		return errors.New("postgres: upsert worker: empty owner")
	}
	ps := w.Pipelines
	if ps == nil {
		ps = []string{}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.q+`.workers (owner, host, pid, pipelines, started_at, last_seen, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (owner) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, pipelines = EXCLUDED.pipelines,
			started_at = EXCLUDED.started_at, last_seen = EXCLUDED.last_seen, expires_at = EXCLUDED.expires_at`,
		w.Owner, w.Host, w.PID, ps, w.StartedAt, w.LastSeen, w.ExpiresAt)
	if err != nil {
		return s.fail("upsert worker", err)
	}
	return nil
}

// RemoveWorker deletes the row of owner.
func (s *Store) RemoveWorker(ctx context.Context, owner string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM `+s.q+`.workers WHERE owner = $1`, owner); err != nil {
		return s.fail("remove worker", err)
	}
	return nil
}

// ListWorkers lists the workers table by owner.
func (s *Store) ListWorkers(ctx context.Context) ([]redrive.Worker, error) {
	rows, err := s.pool.Query(ctx, `SELECT owner, host, pid, pipelines, started_at, last_seen, expires_at
		FROM `+s.q+`.workers ORDER BY owner`)
	if err != nil {
		return nil, s.fail("list workers", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (redrive.Worker, error) {
		var w redrive.Worker
		var pid int32
		err := row.Scan(&w.Owner, &w.Host, &pid, &w.Pipelines, &w.StartedAt, &w.LastSeen, &w.ExpiresAt)
		w.PID = int(pid)
		w.StartedAt, w.LastSeen, w.ExpiresAt = w.StartedAt.UTC(), w.LastSeen.UTC(), w.ExpiresAt.UTC()
		return w, err
	})
	if err != nil {
		return nil, s.fail("list workers", err)
	}
	return out, nil
}

// errDryRun rolls back the transaction of a dry run.
var errDryRun = errors.New("dry run")

// RedriveFrom redrives the selected dead or canceled items from the earlier
// stage req.Stage with the input that stage had; see redrive.Store.
func (s *Store) RedriveFrom(ctx context.Context, req redrive.RedriveFromRequest) (int, error) {
	if req.Stage == "" {
		return 0, fmt.Errorf("postgres: redrive from: %w: no stage", redrive.ErrBadFilter)
	}
	if req.Interval < 0 {
		return 0, errors.New("postgres: redrive from: negative interval")
	}
	f, err := withStates("redrive from", req.Filter, redrive.StateDead, redrive.StateDead, redrive.StateCanceled)
	if err != nil {
		return 0, err
	}
	// A dry run writes nothing, so it counts nothing either.
	counted := false
	if !req.DryRun {
		if counted, err = s.countsFailures(ctx); err != nil {
			return 0, s.fail("redrive from", err)
		}
	}
	var a args
	stageP := a.add(req.Stage)
	// For each selected item, the stage index to restart at: its own when
	// it stopped at the stage, else the latest earlier index whose stored
	// input belongs to the stage, else 0 when its first stage has that
	// name; NULL when it never reached the stage. Inputs are stored on the
	// attempt that moved the item on (migration 0010), and in
	// item_stage_inputs for moves made before it.
	pick := `SELECT s.id, CASE
			WHEN s.stage = ` + stageP + ` THEN s.stage_index
			ELSE coalesce((SELECT x.stage_index FROM (
					SELECT t.next_stage_index AS stage_index FROM ` + s.q + `.attempts t
					WHERE t.item_id = s.id AND t.next_stage = ` + stageP + ` AND t.next_stage_index < s.stage_index
					UNION ALL
					SELECT x.stage_index FROM ` + s.q + `.item_stage_inputs x
					WHERE x.item_id = s.id AND x.stage = ` + stageP + ` AND x.stage_index < s.stage_index) x
				ORDER BY x.stage_index DESC LIMIT 1),
				CASE WHEN s.stage_index > 0 AND EXISTS (SELECT 1 FROM ` + s.q + `.attempts t
					WHERE t.item_id = s.id AND t.stage = ` + stageP + ` AND t.stage_index = 0) THEN 0 END)
		END, s.stage = ` + stageP
	locked := `SELECT id, stage, stage_index, pipeline, reason_class, reason_fingerprint, run_id, state
		FROM ` + s.q + `.items WHERE ` + s.itemWhere(f, &a) + ` ORDER BY id` + limitClause(&a, f.Limit) + ` FOR UPDATE`
	sel := pick + ` FROM (` + locked + `) s ORDER BY s.id`
	if counted {
		// The write clears the reasons: the items leave their failure
		// groups here, from the rows locked until the write.
		sel = `WITH s AS (` + locked + `),
		` + s.itemFailuresGone("s") + `
		` + pick + ` FROM s ORDER BY s.id`
	}
	var n int
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, bulkNoJIT); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, sel, a...)
		if err != nil {
			return err
		}
		var (
			ids, missing []int64
			idx          []int32
			keep         []bool
		)
		var (
			id int64
			ix *int32
			k  bool
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &ix, &k}, func() error {
			if ix == nil {
				missing = append(missing, id)
				return nil
			}
			ids, idx, keep = append(ids, id), append(idx, *ix), append(keep, k)
			return nil
		}); err != nil {
			return err
		}
		if len(missing) > 0 {
			return notReached(req.Stage, missing, len(ids)+len(missing))
		}
		n = len(ids)
		if req.DryRun {
			return errDryRun
		}
		if n == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, bulkPlan); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.redriveFromIDsSQL(counted),
			ids, idx, keep, req.Stage, req.Now, req.Interval.Microseconds())
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, '')`, s.channel)
		return err
	})
	if errors.Is(err, errDryRun) {
		return n, nil
	}
	if errors.Is(err, redrive.ErrBadFilter) {
		return 0, fmt.Errorf("postgres: redrive from: %w", err)
	}
	if err != nil {
		return 0, s.fail("redrive from", err)
	}
	// Items made ready anywhere in claim order (claimfrom.go).
	s.resume.forget()
	return n, nil
}

// redriveFromIDsSQL is RedriveFrom's write of the locked items $1, each
// at the stage index of $2 (its own stage when $3, else stage $4) with
// that stage's input, the i-th due at $5 + i*$6 microseconds; it reopens
// their runs. The items are found as a bulk action finds them (see
// bulkPlan). With counted (see countsFailures) the failure-count triggers
// skip it: its selection took the items off their groups.
func (s *Store) redriveFromIDsSQL(counted bool) string {
	cond := ``
	if counted {
		cond = ` AND ` + failuresCounted
	}
	return `WITH u AS (SELECT * FROM unnest($1::bigint[], $2::int[], $3::bool[]) WITH ORDINALITY AS u(id, idx, keep, ord)),
		upd AS (
			UPDATE ` + s.q + `.items i SET state = 'pending', attempt = 0, rate_limit_waits = 0, failed_attempts = 0,
				stage = CASE WHEN u.keep THEN i.stage ELSE $4 END,
				stage_index = u.idx,
				payload = CASE WHEN u.keep THEN i.payload WHEN u.idx = 0 THEN i.input
					ELSE (SELECT x.payload FROM (
							SELECT t.next_input AS payload, t.id FROM ` + s.q + `.attempts t
							WHERE t.item_id = i.id AND t.next_stage_index = u.idx
							UNION ALL
							SELECT x.payload, 0 FROM ` + s.q + `.item_stage_inputs x WHERE x.item_id = i.id AND x.stage_index = u.idx) x
						ORDER BY x.id DESC LIMIT 1) END,
				next_at = $5::timestamptz + ((u.ord - 1) * $6::bigint) * interval '1 microsecond',
				ready = (u.ord - 1) * $6::bigint <= 0,
				updated_at = $5, lease_owner = '', lease_expires_at = NULL,
				reason_stage = NULL, reason_class = NULL, reason_error = NULL, reason_attempts = NULL, reason_at = NULL,
			reason_fingerprint = NULL
			FROM u WHERE i.id = u.id AND i.id = ANY($1::bigint[])` + cond + `
			RETURNING i.run_id)
		UPDATE ` + s.q + `.runs SET status = 'running', finished_at = NULL, reason = ''
		WHERE id IN (SELECT run_id FROM upd)`
}

// notReached says which selected items never reached stage.
func notReached(stage string, ids []int64, of int) error {
	slices.Sort(ids)
	list := make([]string, 0, 5)
	for _, id := range ids[:min(len(ids), 5)] {
		list = append(list, fmt.Sprint(id))
	}
	more := ""
	if len(ids) > 5 {
		more = ", ..."
	}
	return &redrive.FilterError{Field: "from_stage", Msg: fmt.Sprintf("%d of the %d selected items never reached stage %q, so it has no input to restart them with (items %s%s): narrow the selection, e.g. with a stage filter",
		len(ids), of, stage, strings.Join(list, ", "), more)}
}
