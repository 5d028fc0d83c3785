#!/bin/sh
# accuracy-sqlite.sh - the reservoir thesis's accuracy on a deterministic
# workload: the sqlite3 workload (benchmarks/workloads/sqlite.sql, one
# thread), whose runs make the same calls in the same order, so a
# sampled run is compared with the exact counts of another run, call by
# call, not as shares (the OLTP runs of accuracy.sh differ by more than
# sampling does).
#
# For each way of probing a sampled call tool, the exact reference is
# that probing's own: call sites (--no-opt entry) against --sample all,
# a row per call; entry probes (the default) against --sample rate:100%
# with 20 ms intervals (an interval's sample slots hold some 2 M: the
# default 1 s would lose samples), which counts function entries, tail
# jumps and callbacks included. The accuracy command (built from
# benchmarks/sampling/accuracy) prints, per function with at least MIN
# calls, how far its estimated count and its callers' distribution are
# from the exact ones.
#
# Usage: accuracy-sqlite.sh [METHOD...]   (default: reservoir:20% rate:20%)
# Environment: ROWS (the workload's rows, default 5000), MIN (default
#   1000), REWRITE and ACCURACY (the commands, default rewrite and
#   accuracy on PATH), LIB (default Debian's libsqlite3.so.0).
# Needs sqlite3 (the command).
set -eu
rows=${ROWS:-5000} lib=${LIB:-/usr/lib/x86_64-linux-gnu/libsqlite3.so.0}
[ $# -gt 0 ] || set -- reservoir:20% rate:20%
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed "s/x < 200000/x < $rows/" "$here/../workloads/sqlite.sql" >"$work/w.sql"

# run NAME METHOD [FLAGS]: the workload with libsqlite3 rewritten with
# --tool call --sample METHOD FLAGS, traced into $work/NAME
run() {
	mkdir -p "$work/lib-$1"
	# shellcheck disable=SC2086 # FLAGS holds several words
	${REWRITE:-rewrite} -q --tool call --sample "$2" ${3:-} -o "$work/lib-$1/libsqlite3.so.0" "$lib"
	STINT_OUT="$work/$1" LD_LIBRARY_PATH="$work/lib-$1" sqlite3 :memory: <"$work/w.sql" >"$work/$1.out"
	rm -rf "$work/lib-$1"
}

sqlite3 :memory: <"$work/w.sql" >"$work/native.out"
run sites-exact all "--no-opt entry"
STINT_INTERVAL=20ms run entries-exact rate:100%
for r in sites-exact entries-exact; do
	cmp -s "$work/native.out" "$work/$r.out" || { echo "accuracy-sqlite: $r: output differs from the original's" >&2; exit 1; }
done
for m in "$@"; do
	run sites "$m" "--no-opt entry"
	run entries "$m"
	echo "## $m, call sites (--no-opt entry), against --sample all ($rows rows)"
	${ACCURACY:-accuracy} --counts --min "${MIN:-1000}" "$work/sites-exact" "$work/sites"
	echo "## $m, entry probes, against rate:100% ($rows rows)"
	${ACCURACY:-accuracy} --counts --min "${MIN:-1000}" "$work/entries-exact" "$work/entries"
	rm -rf "$work/sites" "$work/entries"
done
