#!/bin/bash
# main-job-runs.sh N STRESS: runs the README's main job (./examples/llm-batch/run.sh) N times
# from this checkout and prints a line per run: exit code, time, load average before and after,
# and the run's accounting. With STRESS=1 each run has `stress -c 2` (Debian's stress) beside it.
set -u
cd "$(dirname "$0")/.."
n=${1:-10}
st=${2:-0}
if [ "$st" = 1 ] && ! command -v stress >/dev/null 2>&1; then
	echo "main-job-runs.sh: STRESS=1 needs Debian's stress (apt-get install stress)" >&2
	exit 2
fi
logs=$(mktemp -d "${TMPDIR:-/tmp}/main-job-runs.XXXXXX")
for i in $(seq 1 "$n"); do
	spid=""
	if [ "$st" = 1 ]; then
		stress -c 2 >/dev/null 2>&1 &
		spid=$!
		sleep 1
	fi
	l0=$(cut -d' ' -f1 /proc/loadavg)
	t0=$(date +%s.%N)
	./examples/llm-batch/run.sh >"$logs/run-$i.log" 2>&1
	rc=$?
	t1=$(date +%s.%N)
	l1=$(cut -d' ' -f1 /proc/loadavg)
	if [ -n "$spid" ]; then
		kill "$spid" 2>/dev/null
		pkill -P "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
	fi
	sum=$(grep -E "^(items:|run [0-9])" "$logs/run-$i.log" | tr '\n' ' ')
	printf "run %d stress=%s exit=%d time=%.1fs load=%s..%s %s\n" "$i" "$st" "$rc" "$(echo "$t1 - $t0" | bc)" "$l0" "$l1" "$sum"
done
echo "logs in $logs"
