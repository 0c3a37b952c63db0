#!/usr/bin/env bash
# pg-schema-prices.sh [ROUNDS]
#
# What each index and trigger of items and attempts costs a claim and a
# completion on PostgreSQL, by statement time. For each variant below, in
# turn and ROUNDS times over (default 2), it makes a fresh store schema
# (migrated by redrive), drops or changes what the variant names, inserts
# 40,000 pending items in one run, then claims them in batches of 2,000 and
# completes each batch, one transaction each, with the audited loop's
# statements on the store's tables (internal/bench/audited.go): a claim that
# walks items_ready and marks the batch running, a completion that marks it
# succeeded and inserts one attempt row per item. psql times each statement
# on one connection; the script prints the mean per item of rounds 3 – 20,
# claims and completions apart, and the share of the items' updates that
# were HOT (heap-only: no index entry), then drops the schema.
#
# Every variant starts from the layout before migration 0029 (a claim that
# sets state running and enters items_lease; pages filled to 100 %), which
# the script restores on the migrated schema. The store's layout since
# 0029 is the "keep_state_ledger_counted" variant below, with pages filled
# to 45 % rather than 50 and a ledger of its own.
#
# A variant whose third field is "keep_state" claims with a statement that
# leaves the item's state pending and changes no indexed column (the lease
# alone marks it taken), so that with room on its page the claim's new row
# version is heap-only. One whose third field is "keep_state_ledger" does
# the same and also records each claim's leases in one row of a ledger
# (expiry, item IDs, tokens), which is how a rescuer could still find
# expired leases without an index that a claim enters; after the rounds it
# times the rescuer's sweep of that ledger (statements that each take four
# rows whose expiry passed and look up their items), printed per item swept.
# With "keep_state_ledger_counted" each completion also counts its items
# off their claim's ledger row, so that the sweep deletes the rows left
# with no lease open without looking their items up.
#
# Unlike `redrive bench`, this times the statements alone: no engine, no
# rows sent to a worker, no arrays of completions, one connection. It
# prices the schema, not the store's statements (BenchmarkPostgresShapes
# prices those).
#
# REDRIVE_TEST_POSTGRES names the database (default: the local server's
# test database); REDRIVE_BIN a built redrive (default: go build);
# VARIANTS, an extended regular expression, the variants to run by name
# (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-2}
db=${REDRIVE_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
if [ -z "${REDRIVE_BIN:-}" ]; then
	REDRIVE_BIN=$(mktemp -d)/redrive
	go build -o "$REDRIVE_BIN" ./cmd/redrive
fi

# The layout before migration 0029, which every variant starts from.
before_0029="ALTER TABLE items DROP CONSTRAINT IF EXISTS items_no_running_state;"
before_0029+=" CREATE INDEX IF NOT EXISTS items_lease ON items (lease_expires_at) WHERE lease_expires_at IS NOT NULL;"
before_0029+=" ALTER TABLE items SET (fillfactor = 100)"
# One line: each variant is read as one.
ledger_ddl="CREATE TABLE leases (id bigserial PRIMARY KEY, expires_at timestamptz NOT NULL, ids bigint[] NOT NULL, tokens bigint[] NOT NULL, open integer);"
ledger_ddl+=" CREATE INDEX leases_expires ON leases (expires_at)"
variants=(
	"full|"
	"no_count_outbox_triggers|DROP TRIGGER items_count_update ON items; DROP TRIGGER items_outbox_update ON items"
	"no_items_run_state|DROP INDEX items_run_state"
	"items_run_state_not_running|DROP INDEX items_run_state; CREATE INDEX items_run_state ON items (run_id, state, id) WHERE state <> 'running'"
	"no_items_succeeded_updated|DROP INDEX items_succeeded_updated"
	"no_items_lease|DROP INDEX items_lease"
	"no_attempts_timeline|DROP INDEX attempts_timeline"
	"no_attempts_item|DROP INDEX attempts_item"
	"fillfactor_45|ALTER TABLE items SET (fillfactor = 45)"
	"claim_keeps_state|DROP INDEX items_lease|keep_state"
	"claim_keeps_state_fillfactor_45|DROP INDEX items_lease; ALTER TABLE items SET (fillfactor = 45)|keep_state"
	"claim_keeps_state_ledger|DROP INDEX items_lease; ALTER TABLE items SET (fillfactor = 45); $ledger_ddl|keep_state_ledger"
	"claim_keeps_state_ledger_counted|DROP INDEX items_lease; ALTER TABLE items SET (fillfactor = 45); $ledger_ddl|keep_state_ledger_counted"
)

# One round: a claim of 2,000 and its completion, each timed. CLAIM_SET
# and CLAIM_WHERE are the claim's changes and its extra condition.
round_tmpl=$(mktemp)
round_sql=$(mktemp)
sweep_sql=$(mktemp)
trap 'rm -f "$round_tmpl" "$round_sql" "$sweep_sql"' EXIT
cat >"$round_tmpl" <<'EOF'
\set QUIET on
BEGIN;
SELECT set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('jit', 'off', true), set_config('redrive.outbox_unchanged', 'on', true) \gset
\timing on
WITH c AS (UPDATE items SET CLAIM_SET
	WHERE ctid = ANY(ARRAY(SELECT c.ctid FROM items c WHERE c.state = 'pending' AND c.ready
		AND c.next_at <= now() AND c.pipeline = 'p' CLAIM_WHERE
		ORDER BY c.priority DESC, c.order_at, c.id LIMIT 2000 FOR UPDATE SKIP LOCKED))
	RETURNING id, lease_token)CLAIM_LEDGER
SELECT array_agg(id) AS ids CLAIM_LEDGER_COL FROM c \gset
\timing off
COMMIT;
BEGIN;
SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true) \gset
\timing on
WITH done AS (
	UPDATE items i SET state = 'succeeded', lease_token = i.lease_token + 1, lease_owner = '',
		lease_expires_at = NULL, updated_at = now()
	FROM unnest(:'ids'::bigint[]) AS u(id) WHERE i.id = u.id
	RETURNING i.id, i.run_id, i.pipeline)COMPLETE_LEDGER
INSERT INTO attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, started_at, finished_at)
SELECT id, run_id, pipeline, 'a', 0, 1, 'succeeded', now(), now() FROM done;
\timing off
COMMIT;
EOF

# The rescuer's sweep of the ledger: it deletes four rows whose expiry
# passed, looks up their items by ID and token, takes over those whose
# lease expired and writes the rest back under their earliest expiry. A
# row whose count of open leases is 0 is only deleted.
# Here every item was completed first, as most are before their lease
# ends, so the sweep finds none held and its time is the lookups'.
cat >"$sweep_sql" <<'EOF'
\set QUIET on
\timing on
WITH b AS (DELETE FROM leases WHERE id = ANY(ARRAY(SELECT id FROM leases
		WHERE expires_at < now() ORDER BY expires_at LIMIT :lim FOR UPDATE SKIP LOCKED)) RETURNING ids, tokens, open),
	held AS MATERIALIZED (SELECT i.ctid AS t, i.id, i.lease_expires_at AS e FROM b, unnest(b.ids, b.tokens) AS u(id, token)
		JOIN items i ON i.id = u.id AND i.lease_token = u.token AND u.token % 2 = 1
		WHERE i.lease_expires_at IS NOT NULL AND (b.open IS NULL OR b.open > 0)),
	exp AS (SELECT t FROM held WHERE e < now() ORDER BY e, id LIMIT 256),
	upd AS (UPDATE items SET lease_token = lease_token + 2, lease_owner = 'r',
			lease_expires_at = now() + interval '1 minute'
		WHERE ctid = ANY(ARRAY(SELECT t FROM exp)) AND lease_expires_at < now() RETURNING id),
	keep AS (INSERT INTO leases (expires_at, ids, tokens)
		SELECT min(i.lease_expires_at), array_agg(i.id), array_agg(i.lease_token) FROM held h JOIN items i ON i.ctid = h.t
		WHERE h.t NOT IN (SELECT t FROM exp) HAVING count(*) > 0)
SELECT count(*) FROM upd;
EOF

psql_=(psql "$db" -X -q -v ON_ERROR_STOP=1)
claim_set="state = 'running', lease_token = lease_token + 1, lease_owner = 'c',
		lease_expires_at = now() + interval '1 minute', updated_at = now()"
# The lease alone: no state, no updated_at (items_succeeded_updated's key).
keep_state_set="lease_token = lease_token + 1, lease_owner = 'c',
		lease_expires_at = now() + interval '1 minute'"
printf '%-34s %9s %9s %12s %6s %7s\n' variant claim complete "µs per item" "HOT %" sweep
for _ in $(seq "$rounds"); do
	for v in "${variants[@]}"; do
		IFS='|' read -r name ddl kind <<<"$v"
		[[ $name =~ ^(${VARIANTS:-.*})$ ]] || continue
		set_=$claim_set where_="" ledger_="" ledger_col="" complete_=""
		if [[ $kind == keep_state* ]]; then
			set_=$keep_state_set where_="AND c.lease_expires_at IS NULL"
		fi
		# A ledger row expires at once, so that the sweep after the rounds
		# finds every row.
		case $kind in
		keep_state_ledger)
			ledger_=", l AS (INSERT INTO leases (expires_at, ids, tokens) SELECT now(), array_agg(id), array_agg(lease_token) FROM c)" ;;
		keep_state_ledger_counted)
			ledger_=", l AS (INSERT INTO leases (expires_at, ids, tokens, open)
	SELECT now(), array_agg(id), array_agg(lease_token), count(*) FROM c RETURNING id)"
			ledger_col=", (SELECT id FROM l) AS ledger"
			complete_=", n AS (UPDATE leases SET open = open - (SELECT count(*) FROM done) WHERE id = :ledger)" ;;
		esac
		SET_=$set_ WHERE_=$where_ LEDGER_=$ledger_ COL_=$ledger_col COMPLETE_=$complete_ perl -pe '
			s/CLAIM_SET/$ENV{SET_}/; s/CLAIM_WHERE/$ENV{WHERE_}/; s/CLAIM_LEDGER_COL/$ENV{COL_}/;
			s/CLAIM_LEDGER/$ENV{LEDGER_}/; s/COMPLETE_LEDGER/$ENV{COMPLETE_}/' "$round_tmpl" >"$round_sql"
		schema=prices_$name
		"${psql_[@]}" -c "DROP SCHEMA IF EXISTS $schema CASCADE" 2>/dev/null
		# --items 10: a run of bench migrates the schema; its items are
		# deleted below.
		"$REDRIVE_BIN" --db "$db" --pg-schema "$schema" bench --items 10 --insert-rounds 0 >/dev/null
		"${psql_[@]}" -c "SET search_path TO $schema; DELETE FROM items; DELETE FROM attempts; $before_0029; $ddl"
		"${psql_[@]}" -c "SET search_path TO $schema;
			INSERT INTO items (run_id, pipeline, stage, state, enqueued_at, next_at, updated_at, order_at, ready, payload)
			SELECT (SELECT min(id) FROM runs), 'p', 'a', 'pending', now(), now(), now(), now(), true, '{}'
			FROM generate_series(1, 40000)" -c "VACUUM ANALYZE $schema.items" -c "VACUUM ANALYZE $schema.attempts"
		# The rounds run on one connection, as the store's statements run on
		# a pooled one: a new connection's first statements would pay for
		# filling its catalog caches and compiling the trigger functions.
		for _ in $(seq 20); do
			cat "$round_sql"
		done | PGOPTIONS="-c search_path=$schema" "${psql_[@]}" -f - | awk -v n="$name" '/^Time:/ { t++; if (t > 4) { if (t % 2) c += $2; else d += $2 } }
			END { printf "%-34s %9.2f %9.2f %12.2f", n, c * 1000 / 36000, d * 1000 / 36000, (c + d) * 1000 / 36000 }'
		# The statistics of this connection's transactions are flushed
		# when it ends; a new one reads them.
		"${psql_[@]}" -Atc "SELECT to_char(100.0 * n_tup_hot_upd / greatest(n_tup_upd, 1), 'FM990') FROM pg_stat_user_tables
			WHERE schemaname = '$schema' AND relname = 'items'" | awk '{ printf " %6s", $1 }'
		if [[ $kind == keep_state_ledger* ]]; then
			# 40,000 items in ledger rows of 2,000, four rows a statement:
			# five statements, on one connection after one that takes no
			# row (untimed), for the reason above.
			{
				echo '\set lim 0'
				cat "$sweep_sql"
				echo '\set lim 4'
				for _ in $(seq 6); do cat "$sweep_sql"; done
			} | PGOPTIONS="-c search_path=$schema" "${psql_[@]}" -f - |
				awk '/^Time:/ { if (++n > 1) t += $2 } END { printf " %7.2f\n", t * 1000 / 40000 }'
			left=$("${psql_[@]}" -Atc "SELECT count(*) FROM $schema.leases")
			[ "$left" = 0 ] || { echo "pg-schema-prices: the sweep left $left ledger rows" >&2; exit 1; }
		else
			echo
		fi
		"${psql_[@]}" -c "DROP SCHEMA $schema CASCADE" 2>/dev/null
	done
done
