#!/bin/sh
# oltp.sh - the reservoir thesis's experiment here: Debian's MariaDB under
# sysbench's OLTP read/write workload, native and rewritten with
# --tool call and each sampling method, in alternating pairs.
#
# Usage: oltp.sh [CONFIG...]
#   CONFIG is a --sample method (all, rate:P%, every:N, reservoir:P%),
#   with ",site" for --sample-per site; default: all rate:20% every:5
#   reservoir:20% reservoir:20%,site.
# Environment: REPS (pairs per config, default 3), SECS (sysbench seconds,
#   default 10), THREADS (sysbench threads, default 2), REWRITE and TRACE
#   (the commands, default rewrite and trace on PATH), MARIADBD (default
#   /usr/sbin/mariadbd), REWRITE_FLAGS (more rewrite flags, e.g.
#   "--no-opt entry" to probe the call sites instead of the functions).
# Prints a markdown table: per config the median of its pairs' throughput
# ratio (rewritten/native), the medians of tps, mean and p95 latency, the
# trace's size, and the reader thread's busy share.
# Needs mariadb-server and sysbench (apt-get install mariadb-server sysbench).
set -eu
reps=${REPS:-3} secs=${SECS:-10} threads=${THREADS:-2}
[ $# -gt 0 ] || set -- all rate:20% every:5 reservoir:20% reservoir:20%,site
work=$(mktemp -d)
trap 'mariadb-admin -S "$work/sock" -uroot shutdown >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
. "$(dirname "$0")/lib.sh"
install

# run BIN: one sysbench run on BIN; prints "tps avg p95 traceMB readerbusy%"
run() {
	rm -rf "$work/tr"
	serve "$1"
	sb --time="$secs" run >"$work/sb.log"
	stop
	tps=$(sed -n 's/.*transactions:.*(\(.*\) per sec.)/\1/p' "$work/sb.log")
	avg=$(awk '/avg:/ {print $2}' "$work/sb.log")
	p95=$(awk '/95th/ {print $3}' "$work/sb.log")
	mb=0 busy=-
	if [ -d "$work/tr" ]; then
		mb=$(du -sm "$work/tr" | cut -f1)
		busy=$(${TRACE:-trace} stats "$work"/tr/*.arrow 2>/dev/null | sed -n 's/.*reader thread worked .*(\(.*\)%).*/\1/p' | head -1)
	fi
	echo "$tps $avg $p95 $mb ${busy:--}"
}

med() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "| config | throughput vs native (median of $reps pairs) | tps | mean latency ms | p95 ms | trace MB | reader busy % |"
echo "|---|---|---|---|---|---|---|"
for c in "$@"; do
	per=function
	case $c in *,site) per=site ;; esac
	# shellcheck disable=SC2086 # REWRITE_FLAGS holds several words
	${REWRITE:-rewrite} -q ${REWRITE_FLAGS:-} --tool call --sample "${c%,site}" --sample-per $per -o "$work/mariadbd.stint" "$mariadbd"
	: >"$work/rows"
	i=0
	while [ $i -lt "$reps" ]; do
		i=$((i + 1))
		n=$(run "$mariadbd")
		r=$(run "$work/mariadbd.stint")
		echo "$n $r" >>"$work/rows"
	done
	ratio=$(awk '{print $6 / $1}' "$work/rows" | med)
	ntps=$(awk '{print $1}' "$work/rows" | med)
	cols=""
	for k in 6 7 8 9 10; do cols="$cols | $(awk -v k=$k '{print $k}' "$work/rows" | med)"; done
	echo "| $c | $(printf '%.3f' "$ratio") (native $ntps tps)$cols |"
	rm -f "$work/mariadbd.stint"
done
