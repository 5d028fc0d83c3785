#!/bin/sh
# soak.sh - run a rewritten program many times and count the runs whose
# stdout, stderr or exit code differ from the original's. Reliability,
# not speed: intermittent faults (signals landing in our code, stacks
# the runtime wrote on) show up only over many runs.
#
# Usage: soak.sh RUNS BIN [REWRITE-FLAGS...] [-- ARGS...]
#   REWRITE is the rewrite command (default: rewrite on PATH).
#   DECODE=1 also runs "trace stats" (TRACE, default trace on PATH) on
#   each run's traces and counts the runs whose traces all read to the
#   end (a compact trace decoded whole).
# Prints "BIN [FLAGS]: N/RUNS identical" (and ", D/RUNS decoded") and
# exits 1 if any run differed.
set -u
runs=$1 bin=$2
shift 2
flags=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags="$flags $1"; shift; done
[ $# -gt 0 ] && shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" "$@" >"$work/nat.out" 2>"$work/nat.err"
nrc=$?
# shellcheck disable=SC2086 # flags are words
${REWRITE:-rewrite} $flags -o "$work/rw" "$bin" >/dev/null 2>"$work/rewrite.err" || {
	cat "$work/rewrite.err" >&2
	exit 2
}
same=0 decoded=0 i=0
while [ $i -lt "$runs" ]; do
	i=$((i + 1))
	rm -rf "$work/tr"
	STINT_OUT="$work/tr" "$work/rw" "$@" >"$work/out" 2>"$work/err"
	rc=$?
	if [ "${DECODE:-0}" = 1 ]; then
		if ${TRACE:-trace} stats "$work"/tr/*.arrow >"$work/stats" 2>&1; then
			decoded=$((decoded + 1))
		else
			echo "run $i: $(grep -v '^ ' "$work/stats" | tail -1 | head -c 300)" >&2
		fi
	fi
	if [ $rc -eq $nrc ] && cmp -s "$work/out" "$work/nat.out" && cmp -s "$work/err" "$work/nat.err"; then
		same=$((same + 1))
	else
		echo "run $i: exit $rc (native $nrc)" >&2
		head -c 400 "$work/err" >&2
	fi
done
if [ "${DECODE:-0}" = 1 ]; then
	echo "$(basename "$bin") [${flags# }]: $same/$runs identical, $decoded/$runs decoded"
else
	echo "$(basename "$bin") [${flags# }]: $same/$runs identical"
fi
[ $same -eq "$runs" ]
