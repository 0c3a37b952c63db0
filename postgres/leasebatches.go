package postgres

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/redrive/redrive"
)

// The claims' ledger (migration 0029). A claim changes no indexed column
// of items (leasestate.go), so no index tells a leased item from a
// waiting one, and the rescuer cannot walk the leases by expiry as it
// walked items_lease. Each claim instead records its leases in one row of
// lease_batches: its expiry, its items' IDs and how many of its leases are
// still held. Its tokens are 2 * batch + 1 (odd: running; see Complete),
// so every statement that ends leases counts them off their batches from
// the tokens alone, and the rescuer deletes, without reading their items,
// the batches that expired with none held. Only a batch still holding
// leases when it expires (its items' heartbeats extended them, or its
// worker is gone) has its items read.
//
// The count only ever errs high: a statement that ends a lease without
// its token (an item deleted with its run) leaves it counted, and so does
// one that finds its batch's row locked by another statement (see
// countOff); the rescuer reads that batch's items when it expires. A
// batch is never counted below the leases it holds: only a fenced update
// ends a lease and counts it off, at most once, since the update changes
// the token.
//
// Locks: every statement that counts leases off locks the items first,
// then their batches in ID order, skipping batches another statement
// holds; the rescuer locks batches and items skipping any locked. Neither
// waits for a batch, so no cycle forms through one.

// batchesSweep is how many expired batches holding leases one rescue
// reads at most; batchesEnded how many expired batches with none held it
// deletes at most.
const (
	batchesSweep = 16
	batchesEnded = 10000
)

// countOff is the WITH queries that count the leases that the rows of src
// (a WITH query with a column token, one row per lease ended) held off
// their batches, locking the batches in ID order first. Each batch is
// reached through its primary key, whatever the planner settings: an
// UPDATE joined with the counts was a hash join over every batch.
//
// A batch whose row another statement holds (a completion of others of
// its leases, not yet committed; a heartbeat; the rescuer) keeps its
// count, high by the leases this statement ended: the row's lock lasts
// until that statement commits, and waiting for it made the completions
// of one claim's leases, each in a statement of its own as external
// workers send them, commit one after another (787 a second from 32
// callers against 1,282 with the wait skipped; docs/BENCHMARKS.md).
func (s *Store) countOff(src string) string {
	return `lbd AS MATERIALIZED (SELECT token >> 1 AS id, count(*)::int AS n FROM ` + src + ` GROUP BY 1),
	lbk AS MATERIALIZED (SELECT b.id FROM ` + s.q + `.lease_batches b
		WHERE b.id = ANY(ARRAY(SELECT id FROM lbd)) ORDER BY b.id FOR UPDATE SKIP LOCKED),
	lbn AS (UPDATE ` + s.q + `.lease_batches b SET held = b.held - (SELECT n FROM lbd WHERE lbd.id = b.id)
		WHERE b.id = ANY(ARRAY(SELECT id FROM lbk)))`
}

// shortenBatches is a WITH query that brings the expiry of the batches
// of the leases that src (a WITH query with a column lease_token) renewed
// down to until where it ends later, so that a batch never expires after
// a lease it holds. Heartbeats extend leases, and then it changes and
// locks no batch.
func (s *Store) shortenBatches(src, until string) string {
	return `lbs AS (UPDATE ` + s.q + `.lease_batches b SET expires_at = ` + until + `
		WHERE b.id = ANY(ARRAY(SELECT DISTINCT lease_token >> 1 FROM ` + src + `)) AND b.expires_at > ` + until + `)`
}

// claimBatch is the WITH queries nb, c and l: c is upd, an UPDATE of
// items that leases rows with batchToken and returns their itemCols; nb
// is the new batch's ID and l records the batch with expiry until, the
// time its leases began (now) and the claim's pipelines (SQL
// expressions, the last a text[]). The statement ends SELECT * FROM c.
func (s *Store) claimBatch(upd, until, now, pipelines string) string {
	return `nb AS MATERIALIZED (SELECT nextval('` + s.q + `.lease_batches_id_seq') AS id),
	c AS (` + upd + `),
	l AS (INSERT INTO ` + s.q + `.lease_batches (id, expires_at, ids, held, pipelines, claimed_at)
		SELECT (SELECT id FROM nb), ` + until + `, array_agg(id), count(*), ` + pipelines + `::text[], ` + now + `
		FROM c HAVING count(*) > 0)`
}

// batchToken is the token of claimBatch's leases.
const batchToken = `2 * (SELECT id FROM nb) + 1`

// claimExpiredSQL is ClaimExpired's statement. It deletes up to
// batchesEnded expired batches that hold no lease, then reads the items
// of up to batchesSweep expired batches that may (of req's pipelines,
// oldest expiry first), takes over up to req.Limit of their leases that
// expired, oldest first, into a batch of its own, and writes each batch
// read back with the leases it still holds under their earliest expiry
// and with their pipelines, or deletes it if it holds none. Items another
// transaction has locked (a completion under way) are left, and stay in
// their batch. So does an item whose row another transaction (a heartbeat)
// updated after this statement's snapshot and before took locked it: took
// locks the newest version, which the UPDATE, by address, cannot see (see
// claimSQL), so a batch keeps every lease that c did not take over, not
// every lease that took did not lock. A lease dropped from its batch
// without being taken over could never be rescued.
//
// A batch's pipelines are first its claim's; written back, they are those
// of the leases it still holds, so that a batch left holding only leases
// of pipelines this rescuer does not serve leaves its way: read again by
// it under its old expiry, sixteen such batches (of a process that served
// more pipelines, gone) would be all it ever read.
func (s *Store) claimExpiredSQL(req redrive.ClaimRequest) (string, args) {
	var a args
	owner, until, now := a.add(req.Owner), a.add(req.LeaseUntil), a.add(req.Now)
	pipes := a.add(req.Pipelines)
	lim := a.add(req.Limit)
	due := `i.lease_expires_at < ` + now + ` AND i.pipeline = ANY(` + pipes + `::text[])` + stageFilter(req, "i", &a)
	upd := `UPDATE ` + s.q + `.items SET lease_token = ` + batchToken + `,
			lease_owner = ` + owner + `, lease_expires_at = ` + until + `
		WHERE ctid = ANY(ARRAY(SELECT t FROM took))
		RETURNING ` + itemColsWith(now+`::timestamptz`)
	return `WITH ended AS (DELETE FROM ` + s.q + `.lease_batches WHERE id = ANY(ARRAY(
			SELECT id FROM ` + s.q + `.lease_batches WHERE expires_at < ` + now + ` AND held = 0
			ORDER BY expires_at LIMIT ` + strconv.Itoa(batchesEnded) + ` FOR UPDATE SKIP LOCKED))),
	bs AS MATERIALIZED (SELECT id, ids, tokens FROM ` + s.q + `.lease_batches
		WHERE expires_at < ` + now + ` AND (held IS NULL OR held > 0) AND pipelines && ` + pipes + `::text[]
		ORDER BY expires_at, id LIMIT ` + strconv.Itoa(batchesSweep) + ` FOR UPDATE SKIP LOCKED),
	open AS MATERIALIZED (SELECT b.id AS batch, i.ctid AS t, i.id, u.token, i.lease_expires_at AS e, i.pipeline AS p, (` + due + `) AS due
		FROM bs b, unnest(b.ids, coalesce(b.tokens, array_fill(2 * b.id + 1, ARRAY[cardinality(b.ids)]))) AS u(id, token)
		JOIN ` + s.q + `.items i ON i.id = u.id AND i.lease_token = u.token AND u.token % 2 = 1 AND i.lease_expires_at IS NOT NULL
			AND i.id = ANY(ARRAY(SELECT x FROM bs, unnest(bs.ids) AS x))),
	took AS MATERIALIZED (SELECT i.ctid AS t, i.id FROM ` + s.q + `.items i
		WHERE i.id = ANY(ARRAY(SELECT id FROM open WHERE due ORDER BY e, id LIMIT ` + lim + `)) AND ` + due + `
		FOR UPDATE SKIP LOCKED),
	` + s.claimBatch(upd, until, now, pipes) + `,
	kept AS MATERIALIZED (SELECT batch, min(e) AS e, array_agg(id ORDER BY id) AS ids, array_agg(token ORDER BY id) AS tokens,
			count(*)::int AS n, array_agg(DISTINCT p) AS ps
		FROM open WHERE id NOT IN (SELECT id FROM c) GROUP BY batch),
	rewritten AS (UPDATE ` + s.q + `.lease_batches b SET expires_at = k.e, ids = k.ids,
			tokens = CASE WHEN b.tokens IS NULL THEN NULL ELSE k.tokens END, held = k.n, pipelines = k.ps
		FROM kept k WHERE b.id = k.batch),
	gone AS (DELETE FROM ` + s.q + `.lease_batches WHERE id IN (SELECT id FROM bs) AND id NOT IN (SELECT batch FROM kept))
	SELECT * FROM c`, a
}

// needsMigration explains err, from a claim, when the schema predates
// migration 0029 (no lease_batches) or 0030 (no claimed_at): a process of
// this build that runs ahead of its schema (Options.Migrate off) cannot
// claim until the migration is applied, and says so rather than name a
// missing table or column.
func needsMigration(err error) error {
	for _, m := range []struct{ code, name, migration string }{
		{"42P01", "lease_batches", "0029"},
		{"42703", "claimed_at", "0030"},
	} {
		// pgx reports a statement of a batch that cannot be prepared in an
		// error of its own, which does not wrap the server's.
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == m.code && strings.Contains(pe.Message, m.name) ||
			strings.Contains(err.Error(), "SQLSTATE "+m.code) && strings.Contains(err.Error(), m.name) {
			return fmt.Errorf("%w: apply migration %s (redrive migrate up, or Options.Migrate) before claiming", err, m.migration)
		}
	}
	return err
}
