#!/usr/bin/env bash
# deps.sh: installs what the tests need beyond Go, when it is missing:
# promtool (Debian's prometheus package) for the alert rules' tests.
# PostgreSQL is handled by scripts/test.sh (a throwaway cluster if needed).
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "deps.sh: promtool is missing; install Prometheus (Debian: apt-get install prometheus)" >&2
	exit 0
fi
echo "deps.sh: installing promtool (apt-get install prometheus)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
