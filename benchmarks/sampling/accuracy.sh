#!/bin/sh
# accuracy.sh - the reservoir thesis's accuracy on this machine: the
# same OLTP work (sysbench oltp_read_write, a fixed number of
# transactions and seed) run once exhaustive (rewrite --tool call
# --sample all: a row per call) and once per sampling method; each
# sampled trace is compared with the exhaustive one by the accuracy
# command (benchmarks/sampling/accuracy): per function with at least
# MIN calls, its share of all calls and the total variation distance of
# its callers.
#
# Usage: accuracy.sh [METHOD...]   (default: all reservoir:20% rate:20%;
#   all, a second exhaustive run, shows what two runs differ by)
# Environment: EVENTS (transactions, default 300), THREADS (default 2),
#   MIN (default 1000), REWRITE_FLAGS (more rewrite flags for the
#   sampled runs, e.g. "--no-opt entry"), REWRITE and ACCURACY (the commands, default
#   rewrite and accuracy on PATH), MARIADBD (default /usr/sbin/mariadbd).
# Needs mariadb-server and sysbench.
set -eu
events=${EVENTS:-300} threads=${THREADS:-2}
[ $# -gt 0 ] || set -- all reservoir:20% rate:20%
work=$(mktemp -d)
trap 'mariadb-admin -S "$work/sock" -uroot shutdown >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
. "$(dirname "$0")/lib.sh"
install

# trace METHOD DIR [FLAGS]: the work traced with METHOD into DIR
trace() {
	# shellcheck disable=SC2086 # FLAGS holds several words
	${REWRITE:-rewrite} -q ${3:-} --tool call --sample "$1" -o "$work/mariadbd.stint" "$mariadbd"
	rm -rf "$work/tr"
	serve "$work/mariadbd.stint"
	sb --events="$events" --time=0 --rand-seed=1 run >"$work/sb.log"
	stop
	mv "$work/tr" "$2"
}

trace all "$work/all"
for m in "$@"; do
	trace "$m" "$work/sampled" "${REWRITE_FLAGS:-}"
	echo "## $m against all ($events transactions, $(du -sm "$work/all" | cut -f1) MB exhaustive)"
	${ACCURACY:-accuracy} --min "${MIN:-1000}" "$work/all" "$work/sampled"
	rm -rf "$work/sampled"
done
