#!/usr/bin/env bash
# test.sh [go test flags and packages...]
#
# The project's one test command. Runs `go test ./... -count=1 -timeout 20m`
# (extra arguments are passed to go test), after scripts/deps.sh installed
# promtool if it was missing. PostgreSQL tests need a server:
# the one at REDRIVE_TEST_POSTGRES (default
# postgres://postgres@127.0.0.1:5432/test?sslmode=disable) when it is
# reachable, else a throwaway cluster started by scripts/pg-throwaway.sh
# and removed afterwards. CI=true is set for the tests, so that PostgreSQL
# tests fail rather than skip if the database goes missing.
set -euo pipefail

cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1; then
	echo "test.sh: go is not installed or not on PATH (https://go.dev/dl/)" >&2
	exit 1
fi

# promtool for the alert rules' tests (installs Debian's prometheus package
# when missing and run as root).
./scripts/deps.sh

export REDRIVE_TEST_POSTGRES=${REDRIVE_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
export CI=${CI:-true}

# Test ./... unless the arguments name packages themselves.
args=("$@")
has_pkg=0
for a in "${args[@]+"${args[@]}"}"; do
	case $a in
	./* | ../* | github.com/*) has_pkg=1 ;;
	esac
done
if [ "$has_pkg" = 0 ]; then
	args=(./... "${args[@]+"${args[@]}"}")
fi
cmd=(go test -count=1 -timeout 20m "${args[@]}")

if go run ./internal/pgtest/pgping 2>/dev/null; then
	echo "test.sh: using PostgreSQL at $REDRIVE_TEST_POSTGRES" >&2
	exec "${cmd[@]}"
fi
echo "test.sh: no PostgreSQL at $REDRIVE_TEST_POSTGRES; starting a throwaway cluster" >&2
unset REDRIVE_TEST_POSTGRES
exec ./scripts/pg-throwaway.sh "${cmd[@]}"
