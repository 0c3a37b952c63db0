#!/usr/bin/env bash
# deps.sh: installs what the tests need beyond Go, when it is missing:
# promtool (Debian's prometheus package) for the alert rules' tests, and
# Chromium for the web console's browser tests (web/browser_test.go), and
# Ruby for the Ruby worker library's test (cmd/redrive/external_test.go).
# PostgreSQL is handled by scripts/test.sh (a throwaway cluster if needed).
set -euo pipefail
missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
command -v ruby >/dev/null 2>&1 || missing+=(ruby)
if [ ${#missing[@]} = 0 ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "deps.sh: missing ${missing[*]}; install them (Debian: apt-get install ${missing[*]})" >&2
	exit 0
fi
echo "deps.sh: installing ${missing[*]} (apt-get install)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
