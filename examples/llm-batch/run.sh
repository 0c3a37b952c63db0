#!/bin/sh
# Runs the llm-batch example end to end: builds redrive, flakyapi and llmtool,
# starts the flaky model endpoint on a free loopback port, generates 3000
# items (a few deliberately malformed) and runs the pipeline over them with a
# fresh SQLite database. Needs only Go. Usage: ./examples/llm-batch/run.sh
#
# Everything a run makes stays in examples/llm-batch/last-run/ (or $OUT) until
# the next run replaces it: the database (redrive.db), so that the commands the
# run prints work after it ends, the input, the output, flakyapi's log, and the
# binaries in last-run/bin (put redrive on PATH with
# `export PATH="$PWD/examples/llm-batch/last-run/bin:$PATH"`, or install it
# with `go install ./cmd/redrive`).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${OUT:-$here/last-run}
# Replace only a directory this script made (it leaves a marker file).
if [ -e "$work" ] && [ ! -e "$work/.llm-batch-run" ] && [ -n "$(ls -A "$work" 2>/dev/null)" ]; then
	echo "$work is not empty and was not made by this script; set OUT to another directory" >&2
	exit 1
fi
rm -rf "$work"
mkdir -p "$work"
touch "$work/.llm-batch-run"
work=$(cd "$work" && pwd)
bin="$work/bin"
api_pid=""

cleanup() {
	if [ -n "$api_pid" ]; then
		kill "$api_pid" 2>/dev/null || true
		wait "$api_pid" 2>/dev/null || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== building redrive, flakyapi and llmtool into $bin"
mkdir -p "$bin"
(cd "$root" && go build -o "$bin/" ./cmd/redrive ./examples/flakyapi ./examples/llm-batch/llmtool)

# The model API enforces a real rate limit, as a provider's quota does: a token
# bucket of 100 requests/s (burst 100) that answers 429 with Retry-After beyond
# it. Its random faults come on top: 5 % 500, 2 % too slow, 1 % malformed JSON.
echo "== starting flakyapi (limit ${LIMIT:-100} requests/s; 5% 500, 2% slow, 1% malformed JSON)"
"$bin/flakyapi" --addr 127.0.0.1:0 --addr-file "$work/addr" \
	--limit "${LIMIT:-100}" --rate-429 0 --rate-500 0.05 --rate-slow 0.02 --rate-malformed 0.01 \
	--retry-after 1s --slow 2s --seed "${SEED:-1}" 2>"$work/flakyapi.log" &
api_pid=$!
i=0
while [ ! -s "$work/addr" ]; do
	i=$((i + 1))
	if [ "$i" -gt 100 ] || ! kill -0 "$api_pid" 2>/dev/null; then
		echo "flakyapi did not start:" >&2
		cat "$work/flakyapi.log" >&2
		exit 1
	fi
	sleep 0.1
done
FLAKY_URL="http://$(cat "$work/addr")"
API_TOKEN=demo-token
PATH="$bin:$PATH"
export FLAKY_URL API_TOKEN PATH
echo "   listening on $FLAKY_URL"

echo "== generating 3000 items (2 lines are not JSON, 2 items have no text)"
llmtool gen -n "${ITEMS:-3000}" -bad 4 >"$work/items.jsonl"

echo "== redrive run $here/pipeline.yaml --input items.jsonl --db sqlite:$work/redrive.db"
status=0
redrive run "$here/pipeline.yaml" --input "$work/items.jsonl" --db "sqlite:$work/redrive.db" \
	--output "$work/out.jsonl" --progress-interval 2s || status=$?

echo
echo "== flakyapi answered: $(curl -fsS "$FLAKY_URL/stats" 2>/dev/null || echo '(curl not available)')"
echo "== first lines of the output ($work/out.jsonl):"
head -n 3 "$work/out.jsonl" 2>/dev/null || true
echo "== redrive run exited with status $status (0 completed, 3 partial_success, 4 failed, 5 aborted)"
echo "== the database stays at $work/redrive.db until the next run; for the commands above:"
echo "   export PATH=\"$bin:\$PATH\""
exit "$status"
