#!/usr/bin/env bash
# pg-throwaway.sh COMMAND [ARGS...]
#
# Starts a throwaway PostgreSQL cluster (initdb into a temporary directory,
# trust authentication, a free port from 55432 up, a private socket
# directory, fsync off), creates the database "test", runs COMMAND with
# REDRIVE_TEST_POSTGRES pointing at it, then stops and removes the cluster,
# whatever happens. Exits with COMMAND's status.
#
# The cluster runs PostgreSQL's defaults (autovacuum on) except for
# durability, which is off for speed: fsync, synchronous_commit and
# full_page_writes. PG_THROWAWAY_OPTS replaces those three with other server
# options (e.g. PG_THROWAWAY_OPTS="-c autovacuum=off", or "" for the
# defaults throughout, as benchmarks compared with a default server want);
# PG_THROWAWAY_PORT sets the first port tried. To keep a cluster up for
# commands run from elsewhere, run e.g. `sleep infinity` in the background
# (its URL is printed on stderr) and stop it by signalling the process
# group, COMMAND included (kill -- -PGID): bash runs the cleanup of SIGTERM
# and SIGINT only once COMMAND has ended.
#
# When run as root, the server programs run as the postgres user (they
# refuse to run as root). initdb and pg_ctl are taken from PATH, else from
# /usr/lib/postgresql/*/bin (newest first). When PostgreSQL is not installed
# at all, root installs it with apt-get; anyone else gets an error.
set -euo pipefail

if [ $# -eq 0 ]; then
	echo "usage: $0 COMMAND [ARGS...]" >&2
	exit 2
fi

find_bin() {
	local name=$1 d
	if command -v "$name" >/dev/null 2>&1; then
		command -v "$name"
		return 0
	fi
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -V -r) /usr/local/pgsql/bin; do
		if [ -x "$d/$name" ]; then
			echo "$d/$name"
			return 0
		fi
	done
	return 1
}

if ! find_bin initdb >/dev/null; then
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "pg-throwaway: PostgreSQL is not installed; installing it with apt-get" >&2
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
	else
		echo "pg-throwaway: PostgreSQL server programs (initdb, pg_ctl) not found." >&2
		echo "Install PostgreSQL (e.g. apt-get install postgresql) or set REDRIVE_TEST_POSTGRES to a reachable server." >&2
		exit 1
	fi
fi
INITDB=$(find_bin initdb)
PG_CTL=$(find_bin pg_ctl)
PSQL=$(find_bin psql || true)

DIR=$(mktemp -d "${TMPDIR:-/tmp}/redrive-pg-XXXXXX")
DATA=$DIR/data
chmod 755 "$DIR"

as_pg() {
	if [ "$(id -u)" -eq 0 ]; then
		if command -v runuser >/dev/null 2>&1; then
			runuser -u postgres -- "$@"
		else
			local q="" a
			for a in "$@"; do q+=" $(printf '%q' "$a")"; done
			su postgres -s /bin/sh -c "$q"
		fi
	else
		"$@"
	fi
}

if [ "$(id -u)" -eq 0 ]; then
	if ! id postgres >/dev/null 2>&1; then
		echo "pg-throwaway: running as root, but there is no postgres user to run the server as" >&2
		exit 1
	fi
	chown postgres: "$DIR"
fi

started=0
cleanup() {
	if [ "$started" = 1 ]; then
		as_pg "$PG_CTL" stop -D "$DATA" -m immediate -w >/dev/null 2>&1 || true
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
PORT=${PG_THROWAWAY_PORT:-55432}
OPTS=${PG_THROWAWAY_OPTS--c fsync=off -c synchronous_commit=off -c full_page_writes=off}
while ! port_free "$PORT"; do
	PORT=$((PORT + 1))
done

as_pg "$INITDB" -D "$DATA" -U postgres --auth=trust --no-sync -E UTF8 >"$DIR/initdb.log" 2>&1 || {
	cat "$DIR/initdb.log" >&2
	exit 1
}
if ! as_pg "$PG_CTL" start -w -t 60 -D "$DATA" -l "$DIR/server.log" \
	-o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=200 $OPTS" >/dev/null; then
	cat "$DIR/server.log" >&2 || true
	exit 1
fi
started=1

if [ -n "$PSQL" ]; then
	"$PSQL" -q -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -c 'CREATE DATABASE test' >/dev/null
else
	as_pg "$(dirname "$INITDB")/createdb" -h 127.0.0.1 -p "$PORT" -U postgres test
fi

export REDRIVE_TEST_POSTGRES="postgres://postgres@127.0.0.1:$PORT/test?sslmode=disable"
echo "pg-throwaway: PostgreSQL at $REDRIVE_TEST_POSTGRES" >&2
set +e
"$@"
status=$?
set -e
exit $status
