#!/usr/bin/env bash
# pg-statements.sh [REDRIVE BENCH ARGS...]
#
# Where PostgreSQL's time goes, statement by statement: runs
# `redrive bench ARGS` (default: --items 100000 --insert-rounds 0) on a
# throwaway cluster (scripts/pg-throwaway.sh) that loads
# pg_stat_statements, then prints the statements that took the most
# execution time, with their calls, rows, share of the total and WAL
# records per row. The bench's baselines (the audited bare loop, the bare
# SQL queue, COPY) run in the same database, so their statements are listed
# beside the engine's (the tables bare_jobs, bare_queue).
#
# pg_stat_statements must be loaded when the server starts, which a shared
# server cannot be made to do for a benchmark; hence the throwaway cluster.
# Its settings are the installed server's here (fsync and full-page writes
# on, autovacuum off) unless PG_THROWAWAY_OPTS is set; REDRIVE_BIN names a
# built redrive (default: go run ./cmd/redrive).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -eq 0 ]; then
	set -- --items 100000 --insert-rounds 0
fi
if [ -z "${REDRIVE_BIN:-}" ]; then
	REDRIVE_BIN=$(mktemp -d)/redrive
	go build -o "$REDRIVE_BIN" ./cmd/redrive
fi
export REDRIVE_BIN
export PG_THROWAWAY_OPTS="${PG_THROWAWAY_OPTS--c autovacuum=off} -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"

# The quoted arguments travel to the inner shell as its positional ones.
exec bash scripts/pg-throwaway.sh bash -c '
	set -euo pipefail
	U=$REDRIVE_TEST_POSTGRES
	psql "$U" -qc "CREATE EXTENSION pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null
	"$REDRIVE_BIN" --db "$U" bench "$@"
	psql "$U" -c "SELECT calls, rows, round(total_exec_time::numeric) AS ms,
			round((100 * total_exec_time / sum(total_exec_time) OVER ())::numeric, 1) AS pct,
			round(wal_records::numeric / greatest(rows, 1), 1) AS wal_per_row,
			left(regexp_replace(query, '\''\s+'\'', '\'' '\'', '\''g'\''), 140) AS statement
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC LIMIT 25"
' pg-statements "$@"
