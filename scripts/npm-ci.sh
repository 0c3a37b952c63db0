#!/usr/bin/env bash
# npm-ci.sh DIR: installs the npm packages pinned by DIR/package-lock.json
# into DIR/node_modules (git ignores node_modules) with `npm ci`, unless
# they were installed from the same lockfile already; a stamp holding the
# lockfile's SHA-256 tells, so a repeated test run costs no install.
set -euo pipefail
dir=${1:?usage: npm-ci.sh DIR}
if ! command -v npm >/dev/null 2>&1; then
	echo "npm-ci.sh: npm is not installed or not on PATH (Debian: apt-get install nodejs npm)" >&2
	exit 1
fi
want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
stamp=$dir/node_modules/.installed-from-lock
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	exit 0
fi
echo "npm-ci.sh: installing $dir/package-lock.json (npm ci)" >&2
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
echo "$want" >"$stamp"
