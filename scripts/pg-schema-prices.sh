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
# A variant whose third field is "keep_state" claims with a statement that
# leaves the item's state pending and changes no indexed column (the lease
# alone marks it taken), so that with room on its page the claim's new row
# version is heap-only.
#
# Unlike `redrive bench`, this times the statements alone: no engine, no
# rows sent to a worker, no arrays of completions, one connection. It
# prices the schema, not the store's statements (BenchmarkPostgresShapes
# prices those).
#
# REDRIVE_TEST_POSTGRES names the database (default: the local server's
# test database); REDRIVE_BIN a built redrive (default: go build).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-2}
db=${REDRIVE_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
if [ -z "${REDRIVE_BIN:-}" ]; then
	REDRIVE_BIN=$(mktemp -d)/redrive
	go build -o "$REDRIVE_BIN" ./cmd/redrive
fi

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
)

# One round: a claim of 2,000 and its completion, each timed. CLAIM_SET
# and CLAIM_WHERE are the claim's changes and its extra condition.
round_tmpl=$(mktemp)
round_sql=$(mktemp)
trap 'rm -f "$round_tmpl" "$round_sql"' EXIT
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
	RETURNING id)
SELECT array_agg(id) AS ids FROM c \gset
\timing off
COMMIT;
BEGIN;
SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true) \gset
\timing on
WITH done AS (
	UPDATE items i SET state = 'succeeded', lease_token = i.lease_token + 1, lease_owner = '',
		lease_expires_at = NULL, updated_at = now()
	FROM unnest(:'ids'::bigint[]) AS u(id) WHERE i.id = u.id
	RETURNING i.id, i.run_id, i.pipeline)
INSERT INTO attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, started_at, finished_at)
SELECT id, run_id, pipeline, 'a', 0, 1, 'succeeded', now(), now() FROM done;
\timing off
COMMIT;
EOF

psql_=(psql "$db" -X -q -v ON_ERROR_STOP=1)
claim_set="state = 'running', lease_token = lease_token + 1, lease_owner = 'c',
		lease_expires_at = now() + interval '1 minute', updated_at = now()"
# The lease alone: no state, no updated_at (items_succeeded_updated's key).
keep_state_set="lease_token = lease_token + 1, lease_owner = 'c',
		lease_expires_at = now() + interval '1 minute'"
printf '%-34s %9s %9s %12s %6s\n' variant claim complete "µs per item" "HOT %"
for _ in $(seq "$rounds"); do
	for v in "${variants[@]}"; do
		IFS='|' read -r name ddl kind <<<"$v"
		set_=$claim_set where_=""
		if [ "$kind" = keep_state ]; then
			set_=$keep_state_set where_="AND c.lease_expires_at IS NULL"
		fi
		SET_=$set_ WHERE_=$where_ perl -pe 's/CLAIM_SET/$ENV{SET_}/; s/CLAIM_WHERE/$ENV{WHERE_}/' "$round_tmpl" >"$round_sql"
		schema=prices_$name
		"${psql_[@]}" -c "DROP SCHEMA IF EXISTS $schema CASCADE" 2>/dev/null
		# --items 10: a run of bench migrates the schema; its items are
		# deleted below.
		"$REDRIVE_BIN" --db "$db" --pg-schema "$schema" bench --items 10 --insert-rounds 0 >/dev/null
		"${psql_[@]}" -c "SET search_path TO $schema; DELETE FROM items; DELETE FROM attempts; $ddl"
		"${psql_[@]}" -c "SET search_path TO $schema;
			INSERT INTO items (run_id, pipeline, stage, state, enqueued_at, next_at, updated_at, order_at, ready, payload)
			SELECT (SELECT min(id) FROM runs), 'p', 'a', 'pending', now(), now(), now(), now(), true, '{}'
			FROM generate_series(1, 40000)" -c "VACUUM ANALYZE $schema.items" -c "VACUUM ANALYZE $schema.attempts"
		for _ in $(seq 20); do
			PGOPTIONS="-c search_path=$schema" "${psql_[@]}" -f "$round_sql"
		done | awk -v n="$name" '/^Time:/ { t++; if (t > 4) { if (t % 2) c += $2; else d += $2 } }
			END { printf "%-34s %9.2f %9.2f %12.2f", n, c * 1000 / 36000, d * 1000 / 36000, (c + d) * 1000 / 36000 }'
		# The statistics of this connection's transactions are flushed
		# when it ends; a new one reads them.
		"${psql_[@]}" -Atc "SELECT to_char(100.0 * n_tup_hot_upd / greatest(n_tup_upd, 1), 'FM990') FROM pg_stat_user_tables
			WHERE schemaname = '$schema' AND relname = 'items'" | awk '{ printf " %6s\n", $1 }'
		"${psql_[@]}" -c "DROP SCHEMA $schema CASCADE" 2>/dev/null
	done
done
