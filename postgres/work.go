package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
)

// Enqueue adds items to a run at its first stage in one transaction, and
// notifies listeners when it added pending items.
func (s *Store) Enqueue(ctx context.Context, req redrive.EnqueueRequest) ([]redrive.Enqueued, error) {
	if len(req.Items) == 0 {
		return []redrive.Enqueued{}, nil
	}
	var out []redrive.Enqueued
	var err error
	if copyable(req) {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			out, err = s.enqueue(ctx, tx, req)
			return err
		})
	} else {
		// One statement is its own transaction, notification included:
		// one round trip where BEGIN and COMMIT would add two, which is
		// most of an enqueue's latency (docs/BENCHMARKS.md, "Enqueue to
		// start").
		out, err = s.enqueueRows(ctx, s.pool, req)
	}
	if err != nil {
		return nil, s.fail("enqueue", err)
	}
	s.resume.lower(firstEnqueued(req, out))
	s.failuresAdded(deadOnArrival(req, out))
	return out, nil
}

// deadOnArrival is how many of req's items were inserted dead (their
// input invalid), each a row the failure-count trigger added to
// failure_counts.
func deadOnArrival(req redrive.EnqueueRequest, out []redrive.Enqueued) int {
	n := 0
	for i := range req.Items {
		if req.Items[i].Invalid != "" && i < len(out) && !out[i].Existing {
			n++
		}
	}
	return n
}

// firstEnqueued returns the first of the pending items inserted by req in
// claim order, or nil.
func firstEnqueued(req redrive.EnqueueRequest, out []redrive.Enqueued) *readyKey {
	var first *readyKey
	for i := range req.Items {
		it := &req.Items[i]
		if it.Invalid != "" || i >= len(out) || out[i].Existing {
			continue
		}
		order := it.OrderAt
		if order.IsZero() {
			order = req.Now
		}
		// As stored: PostgreSQL keeps microseconds.
		k := readyKey{it.Priority, order.Truncate(time.Microsecond), out[i].ID}
		first = firstKey(first, &k)
	}
	return first
}

// EnqueueTx is Enqueue in the caller's transaction: the items exist if and
// only if tx commits, and the notification fires on commit.
func (s *Store) EnqueueTx(ctx context.Context, tx pgx.Tx, req redrive.EnqueueRequest) ([]redrive.Enqueued, error) {
	if len(req.Items) == 0 {
		return []redrive.Enqueued{}, nil
	}
	out, err := s.enqueue(ctx, tx, req)
	if err != nil {
		return nil, s.fail("enqueue", err)
	}
	// Before tx commits: a claim that runs in between and misses the
	// items may resume after them; they are claimed, in order, once
	// claims walk from the head again (see claimfrom.go).
	s.resume.lower(firstEnqueued(req, out))
	// A fold that runs before tx commits leaves its rows to the next.
	s.failuresAdded(deadOnArrival(req, out))
	return out, nil
}

func (s *Store) enqueue(ctx context.Context, tx pgx.Tx, req redrive.EnqueueRequest) ([]redrive.Enqueued, error) {
	if req.RunID == 0 || req.Pipeline == "" || req.Stage == "" {
		return nil, errors.New("request needs RunID, Pipeline and Stage")
	}
	if copyable(req) {
		return s.enqueueCopy(ctx, tx, req)
	}
	return s.enqueueRows(ctx, tx, req)
}

// copyable reports whether req is sent with COPY (see copyAfter).
func copyable(req redrive.EnqueueRequest) bool {
	return len(req.Items) >= copyAfter && !slices.ContainsFunc(req.Items, func(it redrive.NewItem) bool { return it.Key != "" })
}

// enqueueRows inserts req's items with one INSERT from arrays, which also
// notifies listeners when it added pending items, so that outside a
// transaction it is one statement and one round trip. Rows whose key
// already existed are looked up afterwards: their insert waited for the
// row's transaction to commit, so a new snapshot sees it.
func (s *Store) enqueueRows(ctx context.Context, q querier, req redrive.EnqueueRequest) ([]redrive.Enqueued, error) {
	if req.RunID == 0 || req.Pipeline == "" || req.Stage == "" {
		return nil, errors.New("request needs RunID, Pipeline and Stage")
	}
	n := len(req.Items)
	keys := make([]*string, n)
	payloads := make([][]byte, n)
	prios := make([]int32, n)
	invalid := make([]string, n)
	orders := make([]time.Time, n)
	fps := make([]string, n)
	callbacks := make([]*string, n)
	tps, tss := make([]*string, n), make([]*string, n)
	for i := range req.Items {
		it := &req.Items[i]
		if it.Key != "" {
			keys[i] = &it.Key
		}
		payloads[i] = it.Payload
		prios[i] = int32(it.Priority)
		invalid[i] = it.Invalid
		if it.Invalid != "" {
			fps[i] = redrive.Fingerprint(it.Invalid)
		}
		if it.Callback != "" {
			callbacks[i] = &it.Callback
		}
		if it.TraceParent != "" {
			tps[i] = &it.TraceParent
		}
		if it.TraceState != "" {
			tss[i] = &it.TraceState
		}
		orders[i] = it.OrderAt
		if orders[i].IsZero() {
			orders[i] = req.Now
		}
	}
	// IDs are drawn before the insert so that each input row knows its
	// ID; rows that hit an existing key waste theirs.
	rows, err := q.Query(ctx, `WITH input AS MATERIALIZED (
		SELECT nextval($9::regclass) AS id, u.k, u.p, u.pr, u.inv, u.oa, u.fp, u.cb, u.tp, u.ts, u.ord
		FROM unnest($1::text[], $2::bytea[], $3::int[], $4::text[], $11::timestamptz[], $12::text[], $14::text[],
			$15::text[], $16::text[])
			WITH ORDINALITY AS u(k, p, pr, inv, oa, fp, cb, tp, ts, ord)),
	ins AS (
		INSERT INTO `+s.q+`.items (id, run_id, pipeline, key, stage, stage_index, state, priority, payload, input,
			enqueued_at, next_at, updated_at, order_at, ready,
			reason_stage, reason_class, reason_error, reason_attempts, reason_at, reason_fingerprint, callback,
			traceparent, tracestate)
		SELECT id, $5, $6, k, $7, 0, CASE WHEN inv <> '' THEN 'dead' ELSE 'pending' END, pr, p, p,
			$8, $8, $8, oa, true,
			CASE WHEN inv <> '' THEN $7 END,
			CASE WHEN inv <> '' THEN $10 END,
			nullif(inv, ''),
			CASE WHEN inv <> '' THEN 0 END,
			CASE WHEN inv <> '' THEN $8::timestamptz END,
			CASE WHEN inv <> '' THEN fp END,
			cb, tp, ts
		FROM input ORDER BY ord
		ON CONFLICT (pipeline, key) WHERE key IS NOT NULL DO NOTHING
		RETURNING id, state),
	notified AS (SELECT pg_notify($13, '') FROM (SELECT 1 FROM ins WHERE state = 'pending' LIMIT 1) p)
	SELECT input.id, ins.id IS NOT NULL FROM input LEFT JOIN ins ON ins.id = input.id
	WHERE (SELECT count(*) FROM notified) >= 0
	ORDER BY input.ord`,
		keys, payloads, prios, invalid, req.RunID, req.Pipeline, req.Stage, req.Now,
		s.q+".items_id_seq", redrive.ClassInvalidInput, orders, fps, s.channel, callbacks, tps, tss)
	if err != nil {
		return nil, err
	}
	out := make([]redrive.Enqueued, 0, n)
	var missing []string
	for rows.Next() {
		var id int64
		var inserted bool
		if err := rows.Scan(&id, &inserted); err != nil {
			rows.Close()
			return nil, err
		}
		i := len(out)
		if inserted {
			out = append(out, redrive.Enqueued{ID: id})
		} else {
			out = append(out, redrive.Enqueued{Existing: true})
			missing = append(missing, req.Items[i].Key)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) != n {
		return nil, fmt.Errorf("inserted %d rows of %d", len(out), n)
	}
	if len(missing) > 0 {
		rows, err := q.Query(ctx, `SELECT key, id FROM `+s.q+`.items WHERE pipeline = $1 AND key = ANY($2::text[])`,
			req.Pipeline, missing)
		if err != nil {
			return nil, err
		}
		ids := make(map[string]int64, len(missing))
		var k string
		var id int64
		if _, err := pgx.ForEachRow(rows, []any{&k, &id}, func() error { ids[k] = id; return nil }); err != nil {
			return nil, err
		}
		for i := range out {
			if out[i].Existing {
				id, ok := ids[req.Items[i].Key]
				if !ok {
					return nil, fmt.Errorf("key %q conflicted but was not found", req.Items[i].Key)
				}
				out[i].ID = id
			}
		}
	}
	return out, nil
}

// copyAfter is the size of an enqueue without keys from which the items
// are sent with COPY, the server's fastest way in (docs/BENCHMARKS.md:
// 0.43-0.52 of a bare COPY against 0.29 for the INSERT from arrays). The
// INSERT remains for keyed items, which need ON CONFLICT, and for small
// batches, where its one round trip beats COPY's two.
const copyAfter = 1000

// enqueueCopy inserts items that have no keys with COPY, after drawing
// their IDs from the sequence, so that the result lists them in order.
func (s *Store) enqueueCopy(ctx context.Context, tx pgx.Tx, req redrive.EnqueueRequest) ([]redrive.Enqueued, error) {
	n := len(req.Items)
	rows, err := tx.Query(ctx, `SELECT nextval($1::regclass) FROM generate_series(1, $2)`, s.q+".items_id_seq", n)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	if len(ids) != n {
		return nil, fmt.Errorf("drew %d IDs for %d items", len(ids), n)
	}
	out := make([]redrive.Enqueued, n)
	pending := false
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i == n {
			return nil, nil
		}
		it := &req.Items[i]
		out[i] = redrive.Enqueued{ID: ids[i]}
		order := it.OrderAt
		if order.IsZero() {
			order = req.Now
		}
		row := []any{ids[i], req.RunID, req.Pipeline, req.Stage, "pending", int32(it.Priority), it.Payload, it.Payload,
			req.Now, req.Now, req.Now, order, true, nil, nil, nil, nil, nil, nil, nil, nil, nil}
		if it.Callback != "" {
			row[19] = it.Callback
		}
		if it.TraceParent != "" {
			row[20] = it.TraceParent
		}
		if it.TraceState != "" {
			row[21] = it.TraceState
		}
		if it.Invalid != "" {
			row[4] = "dead"
			row[13], row[14], row[15], row[16], row[17] = req.Stage, redrive.ClassInvalidInput, it.Invalid, int32(0), req.Now
			row[18] = redrive.Fingerprint(it.Invalid)
		} else {
			pending = true
		}
		i++
		return row, nil
	})
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{s.schema, "items"}, []string{"id", "run_id", "pipeline", "stage", "state",
		"priority", "payload", "input", "enqueued_at", "next_at", "updated_at", "order_at", "ready",
		"reason_stage", "reason_class", "reason_error", "reason_attempts", "reason_at", "reason_fingerprint", "callback",
		"traceparent", "tracestate"}, src); err != nil {
		return nil, err
	}
	if pending {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, s.channel); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// stageFilter appends the Only and Exclude conditions of req for the table
// alias t.
func stageFilter(req redrive.ClaimRequest, t string, a *args) string {
	var sql string
	if len(req.Only) > 0 {
		ps, ss := splitStages(req.Only)
		sql += ` AND (` + t + `.pipeline, ` + t + `.stage) IN (SELECT * FROM unnest(` + a.add(ps) + `::text[], ` + a.add(ss) + `::text[]))`
	}
	if len(req.Exclude) > 0 {
		ps, ss := splitStages(req.Exclude)
		sql += ` AND (` + t + `.pipeline, ` + t + `.stage) NOT IN (SELECT * FROM unnest(` + a.add(ps) + `::text[], ` + a.add(ss) + `::text[]))`
	}
	return sql
}

func splitStages(ks []redrive.StageKey) (ps, ss []string) {
	ps, ss = make([]string, len(ks)), make([]string, len(ks))
	for i, k := range ks {
		ps[i], ss[i] = k.Pipeline, k.Stage
	}
	return ps, ss
}

// Claim promotes waiting items that have become due, then leases up to
// req.Limit due pending items in claim order, skipping rows other claimers
// hold locked. Both statements go in one round trip and one transaction.
func (s *Store) Claim(ctx context.Context, req redrive.ClaimRequest) ([]redrive.Lease, error) {
	if req.Limit <= 0 || len(req.Pipelines) == 0 {
		return nil, nil
	}
	t := s.resume.begin(claimShape(req))
	sql, a := s.claimSQL(req, t.from)
	leases, promoted, err := s.claimOrdered(ctx, req.Now, promoteBatch(req.Limit), req.Limit, sql, a, newClaimScanner(req))
	if err != nil {
		s.resume.end(t, nil, nil)
		return nil, s.fail("claim", needsMigration(err))
	}
	slices.SortFunc(leases, func(x, y redrive.Lease) int {
		if c := cmp.Compare(y.Item.Priority, x.Item.Priority); c != 0 {
			return c
		}
		if c := x.Item.OrderAt.Compare(y.Item.OrderAt); c != 0 {
			return c
		}
		return cmp.Compare(x.Item.ID, y.Item.ID)
	})
	var first *readyKey
	if len(leases) > 0 {
		it := &leases[0].Item
		first = &readyKey{it.Priority, it.OrderAt, it.ID}
	}
	s.resume.end(t, first, promoted)
	return leases, nil
}

// claimSQL is the statement that leases the items of req, walking
// items_ready from its head, or, with from, from the earlier of from and
// the first item the claim's promotion made ready (see claimfrom.go).
func (s *Store) claimSQL(req redrive.ClaimRequest, from *readyKey) (string, args) {
	var a args
	owner, until, now := a.add(req.Owner), a.add(req.LeaseUntil), a.add(req.Now)
	var started *time.Time // NULL: the claim clears the start mark
	if !req.StartedAt.IsZero() {
		started = &req.StartedAt
	}
	// A leased item stays pending and ready (leasestate.go): the walk
	// reads past the items in flight.
	pipes := a.add(req.Pipelines)
	cond := `c.state = 'pending' AND c.ready AND c.lease_expires_at IS NULL AND c.next_at <= ` + now + ` AND c.pipeline = ANY(` + pipes + `::text[])` +
		stageFilter(req, "c", &a)
	limit := a.add(req.Limit)
	// The walk of items_ready stops after the batch: every row it meets
	// is due unless a clock runs ahead of this one.
	pick := `SELECT c.ctid FROM ` + s.q + `.items c WHERE ` + cond + `
		ORDER BY c.priority DESC, c.order_at, c.id
		LIMIT ` + limit + ` FOR UPDATE SKIP LOCKED`
	if from != nil {
		// Two walks that start at f, the first within f's priority, the
		// second from the next priority down; the second runs only if the
		// first leaves the batch short. Each is an index range from its
		// start, so no entry before f is read.
		fp, fo, fi := a.add(from.priority), a.add(from.orderAt), a.add(from.id)
		pick = `WITH f AS MATERIALIZED (SELECT p, o, i FROM (
				SELECT ` + fp + `::int AS p, ` + fo + `::timestamptz AS o, ` + fi + `::bigint AS i
				UNION ALL
				SELECT split_part(x, '|', 1)::int, split_part(x, '|', 2)::timestamptz, split_part(x, '|', 3)::bigint
				FROM (SELECT nullif(current_setting('redrive.promoted', true), '') AS x) m WHERE x IS NOT NULL) k
			ORDER BY p DESC, o, i LIMIT 1),
		same AS (SELECT c.ctid FROM ` + s.q + `.items c WHERE ` + cond + `
			AND c.priority = (SELECT p FROM f) AND (c.order_at, c.id) >= ((SELECT o FROM f), (SELECT i FROM f))
			ORDER BY c.order_at, c.id
			LIMIT ` + limit + ` FOR UPDATE SKIP LOCKED),
		below AS (SELECT c.ctid FROM ` + s.q + `.items c WHERE ` + cond + `
			AND c.priority < (SELECT p FROM f)
			ORDER BY c.priority DESC, c.order_at, c.id
			LIMIT ` + limit + ` FOR UPDATE SKIP LOCKED)
		SELECT ctid FROM same UNION ALL SELECT ctid FROM below LIMIT ` + limit
	}
	// + 1: from even to odd, as a running item's token is (see Complete).
	//
	// The walk hands the UPDATE the addresses (ctid) of the rows it locked,
	// not their IDs: by ID, the UPDATE looks each one up in an index, and
	// every index that holds id is priced alike when the statistics say
	// items holds one row (after a VACUUM of an emptied items table, see
	// completePlan); the planner then chose items_run_state, where id is
	// the third column, and walked all of it for every item claimed (0.9 s
	// for a claim of 2,000 from 20,000 items, TestClaimPlanAfterEmptiedVacuum).
	// A row's address is stable while this transaction holds its lock. A
	// row another transaction updated after this statement's snapshot and
	// before the walk locked it is locked in its newest version, which the
	// snapshot cannot see, so the UPDATE leaves it: it stays pending, and a
	// later claim takes it.
	//
	// The claim changes no indexed column (leasestate.go): not the state,
	// not updated_at, which the way out of the lease sets; the batch records
	// when the leases began (see updatedExpr). Its leases take
	// the tokens of a new batch (leasebatches.go).
	upd := `UPDATE ` + s.q + `.items SET lease_token = ` + batchToken + `,
		lease_owner = ` + owner + `, lease_expires_at = ` + until + `, attempt_started_at = ` + a.add(started) + `
	WHERE ctid = ANY(ARRAY(` + pick + `)) AND ` + countsUnchanged + `
	RETURNING ` + claimCols
	// Every item claimed was pending with no lease, and is running now.
	return `WITH ` + s.claimBatch(upd, until, now, pipes) + `,
	` + s.countsMoved("c", "run_id", "'pending'", "'running'") + ` SELECT * FROM c`, a
}

// planSettings are the planner settings of a claim (see claimOrdered).
const planSettings = `SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)`

// claimSettings are planSettings and no JIT: the claim's statements sort
// a few rows (the first item promoted, the resume key), which disabled
// sorts price so high that PostgreSQL compiled the plans, for 0.6 s each
// time, far longer than they run.
//
// They also set redrive.outbox_unchanged for the batch's transaction
// (see outboxUnchanged): its promotion leaves items pending and its claim
// makes them running, neither a state the outbox announces.
const claimSettings = planSettings + `, set_config('jit', 'off', true), set_config('redrive.outbox_unchanged', 'on', true)`

// promoteBatch is how many waiting items one claim of limit items
// promotes at most: more than it takes, so that promotion outpaces claims
// when a backlog comes due at once, and bounded, so that no claim pays for
// a whole backlog.
func promoteBatch(limit int) int { return max(1000, 4*limit) }

// promoteSQL marks up to $2 waiting pending items due at $1 ready, oldest
// next_at first, through items_waiting. Rows another claimer is promoting
// are skipped, not waited for. Pending items hold no lease: the condition
// on it lets the index of the schema before migration 0017 serve the
// query too, for a process that runs ahead of its migration.
//
// The walk hands the UPDATE the addresses of the rows it locked, as a
// claim's does (see claimSQL): by ID, after the VACUUM of an emptied items
// table, the UPDATE walked all of items_waiting and filtered it by the
// IDs, a cost that grew with the backlog on every claim
// (TestLockingWritesAfterEmptiedVacuum). A row updated meanwhile by
// another transaction is left waiting for the next claim's promotion.
// The UPDATE repeats none of the walk's conditions: the rows it reaches are
// the versions the walk locked and checked, and a condition that matches
// an index's predicate let the planner walk that index instead.
func (s *Store) promoteSQL() string {
	return `UPDATE ` + s.q + `.items SET ready = true WHERE ctid = ANY(ARRAY(SELECT w.ctid FROM ` + s.q + `.items w
		WHERE w.state = 'pending' AND w.lease_expires_at IS NULL AND NOT w.ready AND w.next_at <= $1
		ORDER BY w.next_at LIMIT $2 FOR UPDATE SKIP LOCKED))`
}

// promoteKeySQL is promoteSQL that returns the first item it made ready
// in claim order, if any, and leaves it in the transaction's setting
// redrive.promoted for the claim that follows (see claimSQL).
func (s *Store) promoteKeySQL() string {
	return `WITH p AS (` + s.promoteSQL() + ` RETURNING priority, order_at, id),
	m AS (SELECT priority, order_at, id FROM p ORDER BY priority DESC, order_at, id LIMIT 1)
	SELECT priority, order_at, id, set_config('redrive.promoted', priority || '|' || order_at::text || '|' || id, true) FROM m`
}

// claimOrdered promotes up to promote waiting items due at now, then runs
// claim, which leases items, in one transaction and one round trip. It
// returns the leases, read with sc, and the first item promoted in claim
// order, if any.
//
// Both statements are planned with sorts and bitmap scans disabled, so
// that the only plans left walk items_waiting and items_ready in index
// order and stop after their LIMIT. Left to its statistics the planner
// chose a bitmap scan of every ready item and a sort whenever they
// under-counted ready items (no statistics yet, or statistics taken while
// the backlog waited): 360 ms instead of 2 ms per claim with 100,000 items
// due. The settings end with the batch's transaction.
func (s *Store) claimOrdered(ctx context.Context, now time.Time, promote, limit int, claim string, a args, sc *itemScanner) ([]redrive.Lease, *readyKey, error) {
	// A batch is one implicit transaction: the settings are local to it
	// and the promotion commits with the claim.
	b := &pgx.Batch{}
	b.Queue(claimSettings)
	b.Queue(s.promoteKeySQL(), now, promote)
	b.Queue(claim, a...)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	var promoted *readyKey
	for rows.Next() {
		var k readyKey
		var prio int32
		var setting string
		if err := rows.Scan(&prio, &k.orderAt, &k.id, &setting); err != nil {
			rows.Close()
			return nil, nil, err
		}
		k.priority = int(prio)
		promoted = &k
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, err
	}
	out, err := collectLeases(rows, limit, sc)
	if err != nil {
		return nil, nil, err
	}
	return out, promoted, br.Close()
}

// ClaimExpired takes over up to req.Limit running items whose lease expired
// before req.Now, with a new token: the oldest leases first of the claims
// whose expiry passed first (leasebatches.go).
func (s *Store) ClaimExpired(ctx context.Context, req redrive.ClaimRequest) ([]redrive.Lease, error) {
	if req.Limit <= 0 || len(req.Pipelines) == 0 {
		return nil, nil
	}
	sql, a := s.claimExpiredSQL(req)
	// The batches' items are joined by ID, as a completion joins them
	// (see completePlan); with no JIT, which the plans these settings
	// price high would otherwise get, for far longer than they run.
	var leases []redrive.Lease
	err := s.queryPlanned(ctx, claimExpiredPlan, sql, a, func(rows pgx.Rows) (err error) {
		leases, err = collectLeases(rows, req.Limit, newItemScanner())
		return err
	})
	if err != nil {
		return nil, s.fail("claim expired", needsMigration(err))
	}
	slices.SortFunc(leases, func(x, y redrive.Lease) int { return cmp.Compare(x.Item.ID, y.Item.ID) })
	return leases, nil
}

// collectLeases reads the leases of a claim of at most limit items with
// sc (newClaimScanner for a claim's claimCols, newItemScanner for
// itemCols). A
// claim mostly returns its limit (a batch of 2,000 by default): room for
// them saves growing a slice of large Lease values ten times over.
func collectLeases(rows pgx.Rows, limit int, sc *itemScanner) ([]redrive.Lease, error) {
	defer rows.Close()
	out := make([]redrive.Lease, 0, min(limit, 10000))
	for rows.Next() {
		it, token, err := sc.scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, redrive.Lease{Item: it, Token: token})
	}
	return out, rows.Err()
}

func splitRefs(ls []redrive.LeaseRef) (ids, tokens []int64) {
	ids, tokens = make([]int64, len(ls)), make([]int64, len(ls))
	for i, l := range ls {
		ids[i], tokens[i] = l.ItemID, l.Token
	}
	return ids, tokens
}

// Heartbeat extends the leases still held to until and returns the IDs of
// the items whose lease was lost.
func (s *Store) Heartbeat(ctx context.Context, leases []redrive.LeaseRef, until time.Time) ([]int64, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	ids, tokens := splitRefs(leases)
	// Fenced by token, and the leases drive the join (see Complete); the
	// rows are locked in ID order first (see lockLeased). A heartbeat
	// changes no count, and says so to the run_counts trigger before the
	// update runs (see migration 0010): the statement is its own
	// transaction, so the setting ends with it.
	var lost []int64
	err := s.queryPlanned(ctx, leasePlan, s.heartbeatSQL(), []any{ids, tokens, until}, func(rows pgx.Rows) (err error) {
		lost, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if err != nil {
		return nil, s.fail("heartbeat", err)
	}
	return lost, nil
}

// heartbeatSQL is Heartbeat's statement; its arguments are the leases'
// item IDs and tokens and the new end of the leases.
func (s *Store) heartbeatSQL() string {
	return `WITH ` + s.lockLeased("$1", "$2") + `,
	upd AS (UPDATE ` + s.q + `.items i SET lease_expires_at = $3
		FROM unnest($1::bigint[], $2::bigint[]) AS u(id, token)
		WHERE i.id = u.id AND i.lease_token = u.token AND u.token % 2 = 1 AND i.id = ANY($1::bigint[])
			AND ` + lockedFirst + ` AND ` + countsUnchanged + ` AND ` + outboxUnchanged + `
		RETURNING i.id, i.lease_token),
	` + s.shortenBatches("upd", "$3") + lostLeases
}

// lostLeases ends a statement whose WITH query upd returns the id and
// token of each lease it updated: it selects, in ID order, the leases of
// the arrays $1 (IDs) and $2 (tokens) that upd did not, those lost.
const lostLeases = `
	SELECT u.id FROM unnest($1::bigint[], $2::bigint[]) AS u(id, token)
	WHERE NOT EXISTS (SELECT 1 FROM upd WHERE upd.id = u.id AND upd.lease_token = u.token)
	ORDER BY u.id`

// releaseSQL is release's statement; its arguments are the leases' item
// IDs and tokens, the time, the notification channel and the lease losses
// to count on each item.
func (s *Store) releaseSQL() string {
	return `WITH ` + s.lockLeased("$1", "$2") + `,
	upd AS (UPDATE ` + s.q + `.items i SET state = 'pending', next_at = $3, ready = true,
			lease_token = i.lease_token + 1, lease_owner = '', lease_expires_at = NULL, updated_at = $3,
			attempt_started_at = NULL, lease_losses = i.lease_losses + $5
		FROM unnest($1::bigint[], $2::bigint[]) AS u(id, token)
		WHERE i.id = u.id AND i.lease_token = u.token AND u.token % 2 = 1 AND i.id = ANY($1::bigint[])
			AND ` + lockedFirst + ` AND ` + outboxUnchanged + `
		RETURNING i.id, i.priority, i.order_at, u.token),
	` + s.countOff("upd") + `,
	notified AS (SELECT pg_notify($4, '') FROM (SELECT count(*) AS n FROM upd) c WHERE c.n > 0)
	SELECT priority, order_at, id FROM upd WHERE (SELECT count(*) FROM notified) >= 0
	ORDER BY priority DESC, order_at, id LIMIT 1`
}

// markStartedSQL is MarkStarted's statement; its arguments are the
// leases' item IDs and tokens and their start times.
func (s *Store) markStartedSQL() string {
	return `WITH ` + s.lockLeased("$1", "$2") + `,
	upd AS (UPDATE ` + s.q + `.items i SET attempt_started_at = u.at
		FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) AS u(id, token, at)
		WHERE i.id = u.id AND i.lease_token = u.token AND u.token % 2 = 1 AND i.id = ANY($1::bigint[])
			AND ` + lockedFirst + ` AND ` + countsUnchanged + ` AND ` + outboxUnchanged + `
		RETURNING i.id, i.lease_token)` + lostLeases
}

// lockLeased is a WITH query, lk(id, token), that locks the items whose
// lease the arrays ids and tokens (SQL expressions) name and still hold,
// in ID order; lockedFirst, added to an UPDATE's conditions, reads lk in
// full before the UPDATE touches a row. Heartbeats, releases and
// completions of many workers update the same items at once, each naming
// them in its own order (a map's, a batch's); updating them in those
// orders, two statements could each wait for a row the other had locked,
// and PostgreSQL aborted one of them as a deadlock about once a second
// under load. Each of them now waits for rows only while locking them in
// ID order; its UPDATE then finds them locked by itself. (The condition is
// a constant, so the UPDATE's plan is unchanged: a join of the UPDATE
// with lk was planned as a nested loop over lk for every completion,
// quadratically.) Items are joined as a completion joins them (see
// completePlan): by ID, and among the IDs named, planned with leasePlan.
func (s *Store) lockLeased(ids, tokens string) string {
	return `lk AS MATERIALIZED (SELECT i.id, k.token
		FROM unnest(` + ids + `::bigint[], ` + tokens + `::bigint[]) AS k(id, token)
		JOIN ` + s.q + `.items i ON i.id = k.id AND i.lease_token = k.token AND k.token % 2 = 1
			AND i.id = ANY(` + ids + `::bigint[])
		ORDER BY i.id FOR UPDATE OF i)`
}

// claimExpiredPlan are the planner settings of ClaimExpired: leasePlan
// and no JIT.
const claimExpiredPlan = leasePlan + `, set_config('jit', 'off', true)`

// leasePlan are the planner settings of the statements that update the
// items of leases other than a completion (heartbeats, releases, start
// marks): a completion's, for the same join of leases and items (see
// completePlan); their rows are locked in ID order by lockLeased's sort,
// whatever the join.
const leasePlan = completePlan

// queryPlanned runs sql with args after the planner settings in one
// implicit transaction (a batch), so that the settings end with it, and
// calls scan on its rows.
func (s *Store) queryPlanned(ctx context.Context, settings, sql string, args []any, scan func(pgx.Rows) error) error {
	b := &pgx.Batch{}
	b.Queue(settings)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = scan(rows)
			rows.Close()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// lockedFirst is the condition that makes an UPDATE read lk (see
// lockLeased) before its first row: a constant subquery, evaluated once.
const lockedFirst = `(SELECT count(*) FROM lk) >= 0`

// countsUnchanged is the condition that tells the run_counts update
// trigger, before an UPDATE touches a row, that the statement changes no
// item's run or state (see migration 0010): a constant subquery, evaluated
// once, that is always true.
const countsUnchanged = `(SELECT set_config('redrive.counts_unchanged', 'on', true)) = 'on'`

// outboxUnchanged is the condition that tells the outbox's update trigger
// in the same way that the statement moves no item to dead, succeeded or
// canceled, the only changes it announces (see migration 0025), so that
// the trigger does not read the statement's rows to find none.
const outboxUnchanged = `(SELECT set_config('redrive.outbox_unchanged', 'on', true)) = 'on'`

// Release returns the leased items still held to pending, due at now,
// without recording an attempt, and notifies listeners.
func (s *Store) Release(ctx context.Context, leases []redrive.LeaseRef, now time.Time) error {
	return s.release(ctx, "release", leases, now, 0)
}

// ReleaseUnstarted returns the leased items still held, whose attempt never
// started, to pending, due at now, without recording an attempt, counts a
// lease loss on each, and notifies listeners.
func (s *Store) ReleaseUnstarted(ctx context.Context, leases []redrive.LeaseRef, now time.Time) error {
	return s.release(ctx, "release unstarted", leases, now, 1)
}

func (s *Store) release(ctx context.Context, op string, leases []redrive.LeaseRef, now time.Time, losses int) error {
	if len(leases) == 0 {
		return nil
	}
	ids, tokens := splitRefs(leases)
	// Fenced by token, which the release increments (see Complete); rows
	// are locked in ID order first (see lockLeased). The first item
	// released in claim order moves resume points back (claimfrom.go).
	var first *readyKey
	err := s.queryPlanned(ctx, leasePlan, s.releaseSQL(), []any{ids, tokens, now, s.channel, losses}, func(rows pgx.Rows) (err error) {
		first, err = collectFirstKey(rows)
		return err
	})
	if err != nil {
		return s.fail(op, err)
	}
	s.resume.lower(first)
	return nil
}

// collectFirstKey reads rows of (priority, order_at, id), at most one.
func collectFirstKey(rows pgx.Rows) (*readyKey, error) {
	var first *readyKey
	for rows.Next() {
		var k readyKey
		var prio int32
		if err := rows.Scan(&prio, &k.orderAt, &k.id); err != nil {
			rows.Close()
			return nil, err
		}
		k.priority = int(prio)
		first = firstKey(first, &k)
	}
	return first, rows.Err()
}

// MarkStarted records the start of the attempts of the leases still held
// and returns the IDs of the items whose lease was lost. Like a heartbeat
// it changes no count.
func (s *Store) MarkStarted(ctx context.Context, marks []redrive.StartMark) ([]int64, error) {
	if len(marks) == 0 {
		return nil, nil
	}
	ids, tokens := make([]int64, len(marks)), make([]int64, len(marks))
	ats := make([]time.Time, len(marks))
	for i, m := range marks {
		ids[i], tokens[i], ats[i] = m.Lease.ItemID, m.Lease.Token, m.At
	}
	var lost []int64
	err := s.queryPlanned(ctx, leasePlan, s.markStartedSQL(), []any{ids, tokens, ats}, func(rows pgx.Rows) (err error) {
		lost, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if err != nil {
		return nil, s.fail("mark started", err)
	}
	return lost, nil
}

// Complete applies completions with one statement: a completion applies
// while its token is current and the item running, and an applied one
// records its attempt.
func (s *Store) Complete(ctx context.Context, cs []redrive.Completion) ([]bool, error) {
	applied := make([]bool, len(cs))
	if len(cs) == 0 {
		return applied, nil
	}
	for i, c := range cs {
		switch c.State {
		case redrive.StatePending, redrive.StateSucceeded, redrive.StateDead, redrive.StateCanceled:
		default:
			return nil, fmt.Errorf("postgres: complete: completion %d (item %d): invalid next state %q", i, c.ItemID, c.State)
		}
	}
	b, idx, groups := s.completeBatch(ctx, cs)
	// A batch is one implicit transaction: the settings end with it.
	br := s.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, s.fail("complete", err)
	}
	var (
		r       completionRef
		ready   bool
		prio    int32
		orderAt time.Time
		first   *readyKey
	)
	for range b.Len() - 1 {
		rows, err := br.Query()
		if err != nil {
			br.Close()
			return nil, s.fail("complete", err)
		}
		_, err = pgx.ForEachRow(rows, []any{&r.id, &r.token, &ready, &prio, &orderAt}, func() error {
			if i, ok := idx[r]; ok {
				applied[i] = true
			}
			if ready {
				first = firstKey(first, &readyKey{int(prio), orderAt, r.id})
			}
			return nil
		})
		if err != nil {
			br.Close()
			return nil, s.fail("complete", err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, s.fail("complete", err)
	}
	// Items completed back to pending and due are ready again, in their
	// old place in claim order (claimfrom.go).
	s.resume.lower(first)
	if groups >= 0 {
		s.failuresAdded(groups)
	} else {
		s.failuresAdded(failureRows(cs, applied))
	}
	if n := s.completes.Add(1); n%foldEvery == 0 {
		s.foldCounts(ctx)
		if n%countsVacuumEvery == 0 {
			s.vacuumCounts()
		}
	}
	return applied, nil
}

// failureRows is how many rows the failure-count triggers added to
// failure_counts for the applied completions of cs: one for each failed
// attempt recorded (it carries a fingerprint) and one for each item left
// dead or canceled.
func failureRows(cs []redrive.Completion, applied []bool) int {
	n := 0
	for i := range cs {
		if !applied[i] {
			continue
		}
		if cs[i].Record.Outcome != redrive.OutcomeSucceeded {
			n++
		}
		if cs[i].State == redrive.StateDead || cs[i].State == redrive.StateCanceled {
			n++
		}
	}
	return n
}

// completeBatch is the batch of Complete's statements for cs: its plan
// settings, then the success-only statement and the full one, each when it
// has completions; the index in cs of each (item, token) pair sent; and,
// when the full statement counts its failures by group (see
// completeFullSQL), about how many rows it adds to failure_counts, else -1
// (the triggers add a row per failure).
func (s *Store) completeBatch(ctx context.Context, cs []redrive.Completion) (*pgx.Batch, map[completionRef]int, int) {
	// Completions apply as if one after another: of several for one item,
	// only the first that carries the current token can apply, as it
	// leaves the item not running. Send each (item, token) pair once; at
	// most one pair per item matches the item's token.
	idx := make(map[completionRef]int, len(cs))
	// In item ID order, the order in which the statements lock the items
	// (see completePlan); the completions' own indexes (ords in the
	// statements) keep their order for their attempts.
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(cs[x].ItemID, cs[y].ItemID) })
	uniq := order[:0]
	for _, i := range order {
		r := completionRef{cs[i].ItemID, cs[i].Token}
		if _, dup := idx[r]; dup {
			continue
		}
		idx[r] = i
		uniq = append(uniq, i)
	}
	// The successes with the lowest item IDs go in the narrow statement
	// of completeSuccess, the rest (from the first completion it cannot
	// carry on, in ID order) in the full one; so the two statements still
	// lock the items in one ascending ID order between them.
	succ := successArgs{room: len(uniq)}
	p := 0
	for p < len(uniq) && succ.add(&cs[uniq[p]], int32(uniq[p])) {
		p++
	}
	b := &pgx.Batch{}
	b.Queue(completePlan)
	if p > 0 {
		b.Queue(s.completeSuccessSQL(), succ.args()...)
	}
	groups := -1
	if p < len(uniq) {
		counted := s.countsCompletionFailures(ctx)
		args, n := completeFullArgs(cs, uniq[p:])
		if counted {
			groups = n
		}
		b.Queue(s.completeFullSQL(counted), args...)
	}
	return b, idx, groups
}

// completePlan are the planner settings of a completion (see Complete).
// Its statements join the completions, sent in item ID order, to the items
// by ID, and name the items also by id = ANY(the completions' IDs), an
// index condition on items_pkey. With nested loops, merge joins,
// sequential and bitmap scans off, the only plans left hash one side and
// probe it with the other, either the completions or the scan of
// items_pkey by those IDs, both in ID order; so the UPDATE locks the items
// in ID order as it goes, the order in which heartbeats and releases lock
// them (see lockLeased), and no two of them can deadlock. This saves
// locking every item in a pass of its own first, which cost a WAL record
// per item (docs/BENCHMARKS.md, "PostgreSQL against its limits").
//
// Nested loops are off because the planner cannot be kept from putting
// items outer in one: after a VACUUM of an items table whose rows were all
// dead and whose pages it could not truncate, PostgreSQL estimates items
// at one row whatever they hold (reltuples 0 over the pages kept), and
// with a nested loop over the completions and items_pkey as the only join
// left it walked all of items_pkey and rescanned the completions for each
// item: 14.5 s for a batch of 2,000 completions. The join stays by ID,
// not by a row's address (ctid), which a concurrent update of the row
// changes: PostgreSQL rechecks the join on the newest version of a row
// updated since the statement began, and only the ID and token hold there.
const completePlan = `SELECT set_config('enable_nestloop', 'off', true), set_config('enable_mergejoin', 'off', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true)`

// foldEvery is how many Complete calls pass between two foldCounts.
const foldEvery = 32

// foldThreshold is how many run_counts rows a run may have before
// foldCounts folds them.
const foldThreshold = 16

// foldCounts replaces the run_counts rows of each run that has more than
// foldThreshold of them with one row per state holding their sum, in one
// statement, so readers see either the rows or their sums. Concurrent
// folds cannot count a row twice: a row is deleted once, and the sums are
// of the rows deleted. Only one process folds at a time (the others skip);
// a failure only leaves the rows for the next fold.
func (s *Store) foldCounts(ctx context.Context) {
	_, _ = s.pool.Exec(ctx, `WITH l AS (SELECT pg_try_advisory_xact_lock($1, hashtext($2)) AS ok),
	d AS (DELETE FROM `+s.q+`.run_counts WHERE (SELECT ok FROM l) AND run_id IN (
			SELECT run_id FROM `+s.q+`.run_counts GROUP BY run_id HAVING count(*) > $3)
		RETURNING run_id, state, n)
	INSERT INTO `+s.q+`.run_counts (run_id, state, n)
	SELECT run_id, state, sum(n) FROM d GROUP BY run_id, state HAVING sum(n) <> 0`,
		foldLockClass, s.schema, foldThreshold)
}
