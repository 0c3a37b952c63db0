#!/bin/sh
# A stage command for the runner's tests. It reads the item's JSON on stdin
# and behaves according to its "mode" field:
#   ok          print {"ok": true, "in": <input>}
#   passthru    print nothing (the input passes on unchanged)
#   retry1      exit 75 (retryable) on attempt 1, then ok
#   always75    always exit 75 (dead once attempts run out)
#   ratelimit   exit 76 with "retry-after: 200ms" on stderr on attempt 1, then ok
#   rljson      exit 76 with {"retry_after": "200ms"} on stdout on attempt 1, then ok
#   final       exit 3 with a message on stderr (final)
#   notjson     exit 0 but print something that is not JSON (final)
#   bigerr      exit 1 with 20 KB on stderr (kept bounded)
#   slow        sleep 0.3 s, then ok
# With LEDGER set, it first appends the item's key to that file.
in=$(cat)
if [ -n "${LEDGER:-}" ]; then
	echo "$REDRIVE_ITEM_KEY" >>"$LEDGER"
fi
mode=$(printf '%s' "$in" | sed -n 's/.*"mode": *"\([a-z0-9]*\)".*/\1/p')
case "$mode" in
ok | "") printf '{"ok": true, "in": %s}\n' "$in" ;;
passthru) ;;
retry1)
	if [ "$REDRIVE_ATTEMPT" -lt 2 ]; then
		echo "temporarily unavailable" >&2
		exit 75
	fi
	printf '{"ok": true, "attempt": %s}\n' "$REDRIVE_ATTEMPT"
	;;
always75)
	echo "still unavailable" >&2
	exit 75
	;;
ratelimit)
	if [ ! -e "$STATE_DIR/$REDRIVE_ITEM_KEY" ]; then
		: >"$STATE_DIR/$REDRIVE_ITEM_KEY"
		echo "slow down" >&2
		echo "retry-after: 200ms" >&2
		exit 76
	fi
	printf '{"ok": true}\n'
	;;
rljson)
	if [ ! -e "$STATE_DIR/$REDRIVE_ITEM_KEY" ]; then
		: >"$STATE_DIR/$REDRIVE_ITEM_KEY"
		printf '{"retry_after": "200ms"}\n'
		exit 76
	fi
	printf '{"ok": true}\n'
	;;
final)
	echo "bad item: cannot be processed" >&2
	exit 3
	;;
notjson) echo "this is not json" ;;
bigerr)
	i=0
	while [ $i -lt 400 ]; do
		echo "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" >&2
		i=$((i + 1))
	done
	exit 1
	;;
slow)
	sleep 0.3
	printf '{"ok": true}\n'
	;;
*)
	echo "unknown mode $mode" >&2
	exit 64
	;;
esac
