#!/usr/bin/env bash
# lint-openapi.sh: checks docs/openapi.yaml with Redocly CLI (the version
# scripts/openapi-lint/package-lock.json pins, installed there by
# scripts/npm-ci.sh) under redocly.yaml: the recommended rules, warnings
# counted as errors. Exits non-zero on any problem, printing each with its
# line. Run by .ci/run and by web/openapi_lint_test.go.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/npm-ci.sh scripts/openapi-lint
# No usage reports and no notices: the lint needs no network of its own.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_NOTIFICATIONS=true
exec scripts/openapi-lint/node_modules/.bin/redocly lint --config redocly.yaml docs/openapi.yaml
